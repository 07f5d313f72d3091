// The edited plan document (see document.h).
#include "stretto/gui/document.h"

#include "stretto/support/limits.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace stretto::gui {

bool Document::load(const std::string& path, std::string* error) {
  // As every plan read: a device (/dev/zero), a folder or a file over the input limit is
  // refused before it is read.
  auto text = read_input_file(path, "plan");
  if (!text) {
    if (error) *error = render_all(text.error());
    while (error && !error->empty() && error->back() == '\n') error->pop_back();
    return false;
  }
  reset(std::move(*text), path);
  return true;
}

void Document::reset(std::string text, std::string path) {
  text_ = std::move(text);
  path_ = std::move(path);
  saved_ = text_;
  undo_.clear();
  redo_.clear();
  coalescing_ = false;
  ++revision_;
}

bool Document::save(const std::string& path, std::string* error) {
  const std::string p = path.empty() ? path_ : path;
  if (p.empty()) {
    if (error) *error = "no file name";
    return false;
  }
  std::ofstream f(p, std::ios::binary);
  if (!f || !(f << text_)) {
    if (error) *error = "cannot write '" + p + "'";
    return false;
  }
  path_ = p;
  saved_ = text_;
  return true;
}

std::string Document::base_dir() const {
  if (path_.empty()) return ".";
  auto d = std::filesystem::path(path_).parent_path().string();
  return d.empty() ? "." : d;
}

void Document::set_text(std::string text, bool coalesce) {
  if (text == text_) return;
  if (!(coalesce && coalescing_)) undo_.push_back(text_);
  if (undo_.size() > 500) undo_.erase(undo_.begin());
  redo_.clear();
  text_ = std::move(text);
  coalescing_ = coalesce;
  ++revision_;
}

const std::optional<OJson>& Document::json() const {
  if (json_rev_ != revision_) {
    json_rev_ = revision_;
    json_ = OJson::parse(text_, nullptr, false);
    if (json_->is_discarded()) json_.reset();
  }
  return json_;
}

const nlohmann::json& Document::plain_json() const {
  if (plain_rev_ != revision_) {
    plain_rev_ = revision_;
    const auto& j = json();
    plain_ = j ? nlohmann::json::parse(j->dump()) : nlohmann::json();
  }
  return plain_;
}

bool Document::set(const std::string& pointer, const OJson& value, bool coalesce) {
  if (!json()) return false;
  OJson j = *json();
  try {
    j[OJson::json_pointer(pointer)] = value;
  } catch (const std::exception&) {
    return false;
  }
  set_json(j, coalesce);
  return true;
}

bool Document::erase(const std::string& pointer) {
  if (!json() || pointer.empty()) return false;
  OJson j = *json();
  try {
    OJson::json_pointer ptr(pointer);
    OJson& parent = j[ptr.parent_pointer()];
    const std::string last = ptr.back();
    if (parent.is_array())
      parent.erase(static_cast<size_t>(std::stoul(last)));
    else if (parent.is_object())
      parent.erase(last);
    else
      return false;
  } catch (const std::exception&) {
    return false;
  }
  set_json(j);
  return true;
}

void Document::set_json(const OJson& j, bool coalesce) {
  set_text(format_plan(j), coalesce);
}

void Document::undo() {
  if (undo_.empty()) return;
  redo_.push_back(std::move(text_));
  text_ = std::move(undo_.back());
  undo_.pop_back();
  coalescing_ = false;
  ++revision_;
}

void Document::redo() {
  if (redo_.empty()) return;
  undo_.push_back(std::move(text_));
  text_ = std::move(redo_.back());
  redo_.pop_back();
  coalescing_ = false;
  ++revision_;
}

std::string format_plan(const OJson& j) {
  if (!j.is_object()) return j.dump(2) + "\n";
  std::string o = "{\n";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    o += "  " + OJson(it.key()).dump() + ": ";
    if (it.key() == "schedule" && it->is_array()) {
      o += "[\n";
      for (size_t k = 0; k < it->size(); ++k)
        o += "    " + (*it)[k].dump() + (k + 1 < it->size() ? ",\n" : "\n");
      o += "  ]";
    } else {
      o += it->dump();
    }
    o += i + 1 < j.size() ? ",\n" : "\n";
  }
  return o + "}\n";
}

}  // namespace stretto::gui
