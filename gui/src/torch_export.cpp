// Torch CSV export (see torch_export.h).
#include "stretto/gui/torch_export.h"

#include "stretto/pipelines/builders.h"
#include "stretto/pipelines/torch_csv.h"

namespace stretto::gui {

Expected<std::string> torch_csv_of(const std::vector<plan::Directive>& directives) {
  auto s = pipelines::schedule_from_directives(directives);
  if (!s) return fail(s.error());
  return pipelines::write_torch_csv(*s);
}

}  // namespace stretto::gui
