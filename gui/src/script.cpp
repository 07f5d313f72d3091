// Script parsing and execution, and the headless ImGui harness (see script.h).
#include "stretto/gui/script.h"

#include <fmt/format.h>
#include <imgui.h>

#include "stretto/sim/granularity.h"
#include "stretto/support/limits.h"

#include <cctype>
#include <cfloat>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace stretto::gui {
namespace {

struct VerbSpec {
  const char* verb;
  int min_args, max_args;  // max -1: the rest of the line is the last argument
};
constexpr VerbSpec kVerbs[] = {
    {"open", 1, -1}, {"set", 2, -1},   {"click", 1, -1}, {"rclick", 1, -1}, {"type", 2, -1}, {"wheel", 2, 2},
    {"drag", 2, 3},  {"hover", 1, -1}, {"key", 1, 1},
    {"zoom", 2, 2},  {"range", 2, 2},  {"fit", 0, 0},    {"pin", 0, 0},    {"unpin", 0, 0}, {"wait", 0, 0},
    {"frames", 1, 1}, {"undo", 0, 0},  {"redo", 0, 0},   {"save", 1, -1}, {"export-trace", 1, -1},
    {"screenshot", 1, -1}, {"quit", 0, 0}, {"open-trace", 1, -1}, {"export-torch-csv", 1, -1},
    {"search", 0, -1}, {"granularity", 1, 1},
};

constexpr int kKeyEnter = 257, kKeyA = 'A';  // GLFW_KEY_ENTER, GLFW_KEY_A

// A message quotes what the script wrote (a verb, a widget name, a value): a 2 MB line is
// quoted by its first 200 bytes and its length, not whole.
std::string clipped(std::string msg) {
  constexpr size_t kKeep = 200;
  if (msg.size() <= kKeep + 40) return msg;
  const size_t n = msg.size();
  msg.resize(kKeep);
  return msg + fmt::format("... ({} bytes in all)", n);
}

}  // namespace

Expected<std::vector<Action>> parse_script(const std::string& text, const std::string& file) {
  std::vector<Action> out;
  Diagnostics ds;
  std::istringstream in(text);
  std::string line;
  int ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (auto h = line.find('#'); h != std::string::npos && line.rfind("set", 0) != 0) line.resize(h);
    std::istringstream ls(line);
    Action a;
    a.line = ln;
    if (!(ls >> a.verb)) continue;
    const VerbSpec* spec = nullptr;
    for (const auto& v : kVerbs)
      if (a.verb == v.verb) spec = &v;
    auto diag = [&](std::string msg, std::string hint) {
      Diagnostic d;
      d.message = clipped(std::move(msg));
      d.loc.file = file;
      d.loc.line = static_cast<uint32_t>(ln);
      d.loc.col = 1;
      d.source_line = window_line(line, d.loc.col);  // a long line is not echoed whole
      d.hint = std::move(hint);
      ds.push_back(std::move(d));
    };
    if (!spec) {
      std::vector<std::string> names;
      for (const auto& v : kVerbs) names.emplace_back(v.verb);
      const std::string near = nearest(a.verb, names);
      diag(fmt::format("unknown script action '{}'", a.verb),
           near.empty() ? "actions: open, open-trace, set, click, rclick, hover, key, type, wheel, zoom, range, fit, pin, unpin, search, granularity, wait, frames, undo, redo, save, export-trace, export-torch-csv, screenshot, quit"
                        : "did you mean '" + near + "'?");
      continue;
    }
    // Arguments: whitespace-separated; the last one takes the rest of the line when
    // max_args is -1 (paths and JSON values may contain spaces).
    std::string rest;
    std::getline(ls, rest);
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    rest = trim(rest);
    if (a.verb == "drag") {  // drag FROM -> TO [-> shift]
      size_t pos = 0;
      while (true) {
        const size_t arrow = rest.find(" -> ", pos);
        a.args.push_back(trim(rest.substr(pos, arrow == std::string::npos ? std::string::npos : arrow - pos)));
        if (arrow == std::string::npos) break;
        pos = arrow + 4;
      }
      if (a.args.size() < 2 || a.args.size() > 3 || (a.args.size() == 3 && a.args[2] != "shift"))
        diag("'drag' takes FROM -> TO, optionally -> shift", "e.g. drag order 9 0 -> order 9 3");
      else
        out.push_back(std::move(a));
      continue;
    }
    const int want = spec->max_args < 0 ? std::max(spec->min_args, 1) : spec->max_args;
    for (int k = 0; k < want && !rest.empty(); ++k) {
      if (k + 1 == want && spec->max_args < 0) {
        a.args.push_back(rest);
        rest.clear();
        break;
      }
      const auto sp = rest.find_first_of(" \t");
      a.args.push_back(rest.substr(0, sp));
      rest = sp == std::string::npos ? std::string() : trim(rest.substr(sp));
    }
    if (static_cast<int>(a.args.size()) < spec->min_args || !rest.empty()) {
      diag(fmt::format("'{}' takes {} argument(s)", a.verb, spec->min_args), "see `stretto gui --help` or README (GUI scripts)");
      continue;
    }
    if (a.verb == "zoom" || a.verb == "range" || a.verb == "frames" || a.verb == "wheel") {
      try {
        for (size_t k = a.verb == "wheel" ? 1 : 0; k < a.args.size(); ++k) (void)std::stod(a.args[k]);
      } catch (const std::exception&) {
        diag(fmt::format("'{}' needs numbers", a.verb), "zoom T0_MS T1_MS, frames N, wheel WIDGET N");
        continue;
      }
    }
    if (a.verb == "frames") {  // as --frames: a whole number of frames, 1 to 10,000,000
      size_t used = 0;
      long long n = 0;
      try {
        n = std::stoll(a.args[0], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != a.args[0].size() || n < 1 || n > kMaxScriptFrames) {
        diag(fmt::format("'frames {}': a whole number of frames from 1 to {} is due", a.args[0],
                         kMaxScriptFrames),
             "e.g. frames 3");
        continue;
      }
    }
    if (a.verb == "granularity" && !sim::parse_granularity(a.args[0])) {
      diag(fmt::format("'granularity {}': op or pass is due", a.args[0]), "e.g. granularity pass");
      continue;
    }
    if (a.verb == "set") {  // the value is JSON: its nesting is bounded before it is parsed
      if (auto at = find_excess_nesting(a.args[1])) {
        diag(fmt::format("the value nests deeper than {} levels (at byte {} of it)", kMaxJsonDepth,
                         *at + 1),
             "set a plan field to a number, a string or a shallow JSON value");
        continue;
      }
    }
    out.push_back(std::move(a));
  }
  if (!ds.empty()) return fail(std::move(ds));
  return out;
}

Expected<std::vector<Action>> load_script(const std::string& path) {
  // A script is a small text file: a device (/dev/zero), a folder or a huge file is refused
  // before reading it.
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  const auto size = regular ? std::filesystem::file_size(path, ec) : 0;
  if (std::filesystem::exists(path, ec) && (!regular || size > kMaxScriptBytes)) {
    Diagnostic d;
    d.message = !regular ? fmt::format("the script '{}' is not a regular file", path)
                         : fmt::format("the script '{}' is {} bytes, more than a script holds ({})",
                                       path, size, kMaxScriptBytes);
    d.loc.file = path;
    d.hint = "a script is a text file of UI actions, one per line";
    return fail(std::move(d));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    Diagnostic d;
    d.message = "cannot read the script '" + path + "'";
    d.loc.file = path;
    return fail(std::move(d));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  return parse_script(ss.str(), path);
}

bool step_script(App& app, ImGuiIO& io) {
  if (!app.script_error.empty()) return false;
  static auto wait_started = std::chrono::steady_clock::now();
  // Clear injected one-frame input from the previous frame. The scripted mouse stays where the
  // action in progress (or a `hover`) put it; otherwise, in automation, it leaves the window
  // (the backend wrote the real cursor's position).
  io.MouseWheel = 0;
  if (app.click_phase != 0 || app.hover_hold)
    io.MousePos = app.script_mouse;
  else if (app.no_hover)
    io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  for (int guard = 0; guard < 1000 && !app.script.empty(); ++guard) {
    Action& a = app.script.front();
    auto fail_with = [&](std::string msg) {
      app.script_error = fmt::format("script line {}: {}", a.line, clipped(std::move(msg)));
      app.script.clear();
      return false;
    };
    if (a.verb == "frames") {
      if (app.script_wait_frames == 0) app.script_wait_frames = std::max(1, std::stoi(a.args[0]));
      if (--app.script_wait_frames > 0) return true;
      app.script.pop_front();
      return true;
    }
    if (a.verb == "key") {
      // [ctrl+][shift+]K: K is one character (GLFW numbers letters and punctuation by their
      // ASCII code) or Esc, Enter, Left, Right, F1.
      std::string k = a.args[0];
      bool ctrl = false, shift = false;
      for (bool more = true; more;) {
        more = false;
        if (k.rfind("ctrl+", 0) == 0 && k.size() > 5) ctrl = more = true, k = k.substr(5);
        if (k.rfind("shift+", 0) == 0 && k.size() > 6) shift = more = true, k = k.substr(6);
      }
      int code = -1;
      if (k.size() == 1) code = std::toupper(static_cast<unsigned char>(k[0]));
      else if (k == "Esc") code = 256;
      else if (k == "Enter") code = 257;
      else if (k == "Right") code = 262;
      else if (k == "Left") code = 263;
      else if (k == "F1") code = 290;
      if (code < 0 || code >= 512) return fail_with("unknown key '" + k + "'");
      const int phase = app.click_phase < 100 ? 100 : app.click_phase;
      app.click_phase = phase + 1;
      if (phase == 100) {
        io.KeyCtrl = ctrl;
        io.KeyShift = shift;
        io.KeysDown[code] = true;
        return true;
      }
      io.KeysDown[code] = false;
      io.KeyCtrl = io.KeyShift = false;
      app.click_phase = 0;
      app.script.pop_front();
      return true;
    }
    const bool click = a.verb == "click" || a.verb == "rclick";
    if (click || a.verb == "type" || a.verb == "wheel" || a.verb == "drag") app.hover_hold = false;
    if (a.verb == "drag") {
      // Widget names may contain spaces: FROM and TO are separated by " -> ".
      auto fi = app.hooks.find(a.args[0]), ti = app.hooks.find(a.args[1]);
      if (fi == app.hooks.end() || ti == app.hooks.end()) {
        if (++app.click_phase > 30)
          return fail_with(fmt::format("no widget named '{}'", fi == app.hooks.end() ? a.args[0] : a.args[1]));
        return true;
      }
      const int phase = app.click_phase < 100 ? 100 : app.click_phase;
      app.click_phase = phase + 1;
      const Rect f = fi->second, t = ti->second;
      io.KeyShift = a.args.size() > 2 && a.args[2] == "shift";
      io.MousePos = app.script_mouse;
      switch (phase) {
        case 100:
          io.MousePos = app.script_mouse = ImVec2(f.cx(), f.cy());
          return true;
        case 101:
          io.MouseDown[0] = true;
          return true;
        // The button stays down: set again each frame, since in the window the backend's
        // NewFrame writes the real (released) button before the script runs.
        case 102:  // past the drag threshold: the drag starts
          io.MouseDown[0] = true;
          io.MousePos = app.script_mouse = ImVec2(f.cx() + 12, f.cy() + 3);
          return true;
        case 103:
        case 104:
          io.MouseDown[0] = true;
          io.MousePos = app.script_mouse = ImVec2(t.cx(), t.cy());
          return true;
        case 105:
          io.MouseDown[0] = false;
          return true;
      }
      io.KeyShift = false;
      app.click_phase = 0;
      app.script.pop_front();
      return true;
    }
    if (click || a.verb == "type" || a.verb == "wheel" || a.verb == "hover") {
      auto it = app.hooks.find(a.args[0]);
      if (it == app.hooks.end()) {
        // Widgets exist after a frame lays them out; allow a few frames.
        if (++app.click_phase > 30) return fail_with(fmt::format("no widget named '{}'", a.args[0]));
        return true;
      }
      const Rect r = it->second;
      const int phase = app.click_phase < 100 ? 100 : app.click_phase;
      app.click_phase = phase + 1;
      io.MousePos = app.script_mouse = ImVec2(r.cx(), r.cy());
      if (a.verb == "hover") app.hover_hold = true;
      if (a.verb == "wheel" || a.verb == "hover") {
        if (a.verb == "wheel") io.MouseWheel = std::stof(a.args[1]);
        app.click_phase = 0;
        app.script.pop_front();
        return true;
      }
      const int button = a.verb == "rclick" ? 1 : 0;
      switch (phase) {
        case 100:  // hover
          return true;
        case 101:
          io.MouseDown[button] = true;
          return true;
        case 102:
          io.MouseDown[button] = false;
          if (click) break;
          return true;
        case 103:  // select all
          io.KeyCtrl = true;
          io.KeysDown[kKeyA] = true;
          return true;
        case 104:
          io.KeysDown[kKeyA] = false;
          io.KeyCtrl = false;
          for (char c : a.args[1]) io.AddInputCharacter(static_cast<unsigned>(static_cast<unsigned char>(c)));
          return true;
        case 105:
          io.KeysDown[kKeyEnter] = true;
          return true;
        case 106:
          io.KeysDown[kKeyEnter] = false;
          break;
      }
      app.click_phase = 0;
      app.script.pop_front();
      return true;
    }
    if (a.verb == "wait") {
      if (app.script_wait_frames == 0) {
        app.script_wait_frames = 1;
        wait_started = std::chrono::steady_clock::now();
      }
      app.pump();
      const bool done = app.submitted_rev == app.doc.revision() &&
                        app.submitted_granularity == app.granularity && !app.worker.busy() &&
                        app.shown_generation == app.submitted;
      if (!done) {
        if (std::chrono::steady_clock::now() - wait_started > std::chrono::seconds(300))
          return fail_with("the simulation did not finish within 300 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        return true;
      }
      app.script_wait_frames = 0;
      app.script.pop_front();
      return true;  // one frame to show the result
    }
    // Immediate actions.
    if (a.verb == "open") {
      if (!app.open(a.args[0])) return fail_with(app.status);
    } else if (a.verb == "open-trace") {
      if (!app.open_trace(a.args[0])) return fail_with(app.status);
    } else if (a.verb == "set") {
      OJson v = OJson::parse(a.args[1], nullptr, false);
      if (v.is_discarded()) v = a.args[1];
      if (!app.doc.set(a.args[0], v)) return fail_with("cannot set " + a.args[0] + " (is the plan valid JSON?)");
      app.doc.seal();
    } else if (a.verb == "zoom") {
      app.zoom(std::stod(a.args[0]) * 1e6, std::stod(a.args[1]) * 1e6);
    } else if (a.verb == "range") {
      app.tl.range_t0 = std::stod(a.args[0]) * 1e6;
      app.tl.range_t1 = std::stod(a.args[1]) * 1e6;
    } else if (a.verb == "fit") {
      app.fit();
    } else if (a.verb == "search") {
      app.search.query = a.args.empty() ? std::string() : a.args[0];
      app.update_search();
      app.search.worker.wait_idle();  // a script reads the matches right after
      app.update_search();
    } else if (a.verb == "granularity") {
      app.granularity = *sim::parse_granularity(a.args[0]);  // (checked by parse_script)
    } else if (a.verb == "pin") {
      if (!app.current) return fail_with("nothing to pin yet (add 'wait' first)");
      app.pin_baseline(true);
    } else if (a.verb == "unpin") {
      app.pin_baseline(false);
    } else if (a.verb == "undo") {
      app.doc.undo();
    } else if (a.verb == "redo") {
      app.doc.redo();
    } else if (a.verb == "save") {
      std::string err;
      if (!app.doc.save(a.args[0], &err)) return fail_with(err);
    } else if (a.verb == "export-trace") {
      std::string err;
      if (!app.export_trace(a.args[0], &err)) return fail_with(err);
    } else if (a.verb == "export-torch-csv") {
      std::string err;
      if (!app.export_torch_csv(a.args[0], &err)) return fail_with(err);
    } else if (a.verb == "screenshot") {
      app.screenshot_request = a.args[0];
      app.script.pop_front();
      return true;  // the window writes it after this frame
    } else if (a.verb == "quit") {
      app.quit = true;
    }
    app.script.pop_front();
  }
  return true;
}

// ------------------------------------------------------------------------------- Headless

Headless::Headless(float width, float height) {
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.LogFilename = nullptr;
  io.DisplaySize = ImVec2(width, height);
  io.DeltaTime = 1.0f / 60;
  io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
  // GLFW's key numbering, as in the window.
  const int map[][2] = {{ImGuiKey_Tab, 258},       {ImGuiKey_LeftArrow, 263}, {ImGuiKey_RightArrow, 262},
                        {ImGuiKey_UpArrow, 265},   {ImGuiKey_DownArrow, 264}, {ImGuiKey_PageUp, 266},
                        {ImGuiKey_PageDown, 267},  {ImGuiKey_Home, 268},      {ImGuiKey_End, 269},
                        {ImGuiKey_Insert, 260},    {ImGuiKey_Delete, 261},    {ImGuiKey_Backspace, 259},
                        {ImGuiKey_Space, 32},      {ImGuiKey_Enter, 257},     {ImGuiKey_Escape, 256},
                        {ImGuiKey_KeyPadEnter, 335}, {ImGuiKey_A, 'A'},       {ImGuiKey_C, 'C'},
                        {ImGuiKey_V, 'V'},         {ImGuiKey_X, 'X'},         {ImGuiKey_Y, 'Y'},
                        {ImGuiKey_Z, 'Z'}};
  for (const auto& m : map) io.KeyMap[m[0]] = m[1];
  unsigned char* px;
  int w, h;
  io.Fonts->GetTexDataAsRGBA32(&px, &w, &h);
}

Headless::~Headless() {
  ImGui::DestroyContext();
}

ImGuiIO& Headless::io() {
  return ImGui::GetIO();
}

bool Headless::frame(App& app) {
  ImGuiIO& io = ImGui::GetIO();
  const bool ok = step_script(app, io);
  ImGui::NewFrame();
  draw_app(app);
  ImGui::Render();
  return ok;
}

bool Headless::run_script(App& app, int max_frames) {
  for (int i = 0; i < max_frames && !app.script.empty() && !app.quit; ++i)
    if (!frame(app)) return false;
  return app.script_error.empty() && app.script.empty();
}

}  // namespace stretto::gui
