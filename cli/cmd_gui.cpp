// `stretto gui [PLAN]`: the interactive explorer (gui/, DESIGN.md §9), with the automation
// flags that make every GUI behaviour reproducible under Xvfb.
#include <cinttypes>
#include <cstdio>

#include "commands.h"
#include "output.h"
#include "usage.h"
#include "stretto/gui/script.h"
#include "stretto/gui/window.h"

namespace stretto::cli {

void add_gui_command(CLI::App& app, Commands& out) {
  struct Opts {
    std::string plan, screenshot, script, dump_state, size = "1600x900";
    int frames = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* c = app.add_subcommand("gui", "Edit a plan and watch it re-simulate (Dear ImGui window)");
  c->add_option("plan", o->plan, "Plan file to open (a bad file opens with its diagnostics shown)");
  c->add_option("--frames", o->frames, "Render N frames (after the script finishes), then exit")
      ->check(CLI::Range(1, 10000000));
  c->add_option("--screenshot", o->screenshot, "Write a PNG of the last frame (needs --frames)");
  c->add_option("--script", o->script, "Replay UI actions from FILE (README: GUI scripts)");
  c->add_option("--dump-state", o->dump_state, "Write what the UI shows at exit as JSON");
  c->add_option("--size", o->size, "Window size WIDTHxHEIGHT")->capture_default_str();
  add_limit_options(c);
  out.push_back({c, [o]() -> int {
                   gui::WindowOptions wo;
                   // Each frame is drawn, read back and encoded at this size: at most 8K UHD's
                   // pixels (7680 x 4320, ~130 MB per RGBA copy; 16384 x 16384 took 5.2 GiB).
                   constexpr int64_t kMaxPixels = int64_t{7680} * 4320;
                   int64_t w = 0, h = 0;
                   char x = 0, tail = 0;
                   if (std::sscanf(o->size.c_str(), "%6" SCNd64 "%c%6" SCNd64 "%c", &w, &x, &h,
                                   &tail) != 3 ||
                       x != 'x' || w < 200 || h < 150 || w > 16384 || h > 16384 ||
                       w * h > kMaxPixels) {
                     std::fprintf(stderr,
                                  "error: --size '%s': expected WIDTHxHEIGHT from 200x150 to at "
                                  "most %lld pixels (7680x4320), e.g. 1600x900\n",
                                  o->size.c_str(), static_cast<long long>(kMaxPixels));
                     return 2;
                   }
                   wo.width = static_cast<int>(w);
                   wo.height = static_cast<int>(h);
                   if (!o->screenshot.empty() && o->frames == 0 && o->script.empty()) {
                     std::fprintf(stderr, "error: --screenshot needs --frames N (or a script)\n");
                     return 2;
                   }
                   // Neither output may replace the plan, the script or the other output.
                   if (auto ok = check_output(o->screenshot, {o->plan, o->script, o->dump_state}); !ok)
                     return report(ok.error());
                   if (auto ok = check_output(o->dump_state, {o->plan, o->script}); !ok)
                     return report(ok.error());
                   gui::App a;
                   if (!o->script.empty()) {
                     auto s = gui::load_script(o->script);
                     if (!s) return report(s.error());
                     a.script.assign(s->begin(), s->end());
                   }
                   // A file that cannot be read as text (missing, a device, a folder, over the
                   // input limit) is refused before any window opens; a plan with errors opens
                   // with its diagnostics shown.
                   if (!o->plan.empty() && !a.open(o->plan)) {
                     std::fprintf(stderr, "%s\n", a.status.c_str());
                     return 2;
                   }
                   wo.frames = o->frames;
                   if (wo.frames == 0 && !o->script.empty() && (!o->screenshot.empty() || !o->dump_state.empty()))
                     wo.frames = 1;
                   wo.screenshot = o->screenshot;
                   wo.dump_state = o->dump_state;
                   wo.vsync = wo.frames == 0;
                   return gui::run_window(a, wo);
                 }});
}

}  // namespace stretto::cli
