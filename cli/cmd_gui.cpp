// `stretto gui [PLAN]`: the interactive explorer (gui/, DESIGN.md §9), with the automation
// flags that make every GUI behaviour reproducible under Xvfb.
#include <cstdio>

#include "commands.h"
#include "output.h"
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
  out.push_back({c, [o]() -> int {
                   gui::WindowOptions wo;
                   if (std::sscanf(o->size.c_str(), "%dx%d", &wo.width, &wo.height) != 2 ||
                       wo.width < 200 || wo.height < 150 || wo.width > 16384 || wo.height > 16384) {
                     std::fprintf(stderr, "error: --size '%s': expected WIDTHxHEIGHT, e.g. 1600x900\n",
                                  o->size.c_str());
                     return 2;
                   }
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
                   if (!o->plan.empty() && !a.open(o->plan)) {
                     std::fprintf(stderr, "error: %s\n", a.status.c_str());
                     if (o->frames > 0) return 2;
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
