#pragma once
// The real window: GLFW + OpenGL 3 around draw_app(), with the automation the CLI exposes
// (stretto gui PLAN --frames N --screenshot F.png --script S --dump-state F.json).

#include <string>
#include <vector>

#include "stretto/gui/app.h"

namespace stretto::gui {

struct WindowOptions {
  int frames = 0;          // > 0: render at least this many frames, then exit (after the script)
  std::string screenshot;  // PNG of the last frame
  std::string dump_state;  // App::state_json() at exit
  int width = 1600, height = 900;
  bool vsync = true;       // off for --frames runs (deterministic, as fast as possible)
};

/// Runs the window until it is closed, `quit`, or `frames` are done. Returns the exit code:
/// 0, 1 (no window could be opened), 2 (the script failed).
int run_window(App& app, const WindowOptions& opt);

/// Writes RGBA pixels (top row first) as a PNG.
bool write_png(const std::string& path, int w, int h, const unsigned char* rgba);
/// Reads back the current GL framebuffer (top row first).
void read_framebuffer(int w, int h, std::vector<unsigned char>& rgba);

}  // namespace stretto::gui
