// GLFW + OpenGL 3 window loop, screenshots and DPI-aware fonts (see window.h).
#include "stretto/gui/window.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb_image_write.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "stretto/gui/script.h"

namespace stretto::gui {

bool write_png(const std::string& path, int w, int h, const unsigned char* rgba) {
  return stbi_write_png(path.c_str(), w, h, 4, rgba, w * 4) != 0;
}

void read_framebuffer(int w, int h, std::vector<unsigned char>& rgba) {
  std::vector<unsigned char> raw(static_cast<size_t>(w) * static_cast<size_t>(h) * 4);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, raw.data());
  rgba.resize(raw.size());
  const size_t row = static_cast<size_t>(w) * 4;
  for (int y = 0; y < h; ++y)  // GL's origin is the bottom-left corner
    std::copy_n(raw.data() + static_cast<size_t>(h - 1 - y) * row, row, rgba.data() + static_cast<size_t>(y) * row);
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = 255;
}

namespace {

void on_drop(GLFWwindow* w, int count, const char** paths) {
  auto* app = static_cast<App*>(glfwGetWindowUserPointer(w));
  for (int i = 0; i < count; ++i) app->dropped.emplace_back(paths[i]);
}

void setup_fonts(App& app, float scale) {
  ImGuiIO& io = ImGui::GetIO();
  const char* kFont = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  const float px = std::round(15.0f * scale);
  if (std::filesystem::exists(kFont) && io.Fonts->AddFontFromFileTTF(kFont, px)) {
  } else {
    ImFontConfig cfg;
    cfg.SizePixels = std::round(13.0f * scale);
    io.Fonts->AddFontDefault(&cfg);
  }
  ImGui::GetStyle().ScaleAllSizes(scale);
  app.font_scale = scale;
}

}  // namespace

int run_window(App& app, const WindowOptions& opt) {
  glfwSetErrorCallback([](int, const char* msg) { std::fprintf(stderr, "glfw: %s\n", msg); });
  if (!glfwInit()) {
    std::fprintf(stderr, "error: cannot open a window (no display?); run under xvfb-run for headless use\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* win = glfwCreateWindow(opt.width, opt.height, "Stretto", nullptr, nullptr);
  if (!win) {
    glfwTerminate();
    std::fprintf(stderr, "error: cannot create an OpenGL 3.3 window\n");
    return 1;
  }
  glfwMakeContextCurrent(win);
  glfwSwapInterval(opt.vsync ? 1 : 0);
  glfwSetWindowUserPointer(win, &app);
  glfwSetDropCallback(win, on_drop);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;
  io.LogFilename = nullptr;
  float xs = 1, ys = 1;
  glfwGetWindowContentScale(win, &xs, &ys);
  ImGui::StyleColorsDark();
  setup_fonts(app, std::max(1.0f, xs));
  ImGui_ImplGlfw_InitForOpenGL(win, true);
  ImGui_ImplOpenGL3_Init("#version 330 core");

  // Automation (--frames): only the script moves the mouse, so screenshots show no hover.
  if (opt.frames > 0) app.no_hover = true;
  int rc = 0;
  std::vector<unsigned char> px;
  for (int f = 0; !glfwWindowShouldClose(win) && !app.quit; ++f) {
    glfwPollEvents();
    const auto t_ui = std::chrono::steady_clock::now();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    // Scripted input goes after the backend's NewFrame (it overwrites mouse state).
    if (!step_script(app, io)) {
      std::fprintf(stderr, "error: %s\n", app.script_error.c_str());
      rc = 2;
      break;
    }
    ImGui::NewFrame();
    draw_app(app);
    ImGui::Render();
    const auto t_gl = std::chrono::steady_clock::now();
    int w, h;
    glfwGetFramebufferSize(win, &w, &h);
    glViewport(0, 0, w, h);
    glClearColor(0.08f, 0.09f, 0.1f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (opt.frames > 0) {
      glFinish();
      auto ms = [](auto a, auto b) { return std::chrono::duration<float, std::milli>(b - a).count(); };
      const auto t_end = std::chrono::steady_clock::now();
      if (app.script.empty() && app.frame_ui_ms.size() < 100000) {  // after the script
        app.frame_ui_ms.push_back(ms(t_ui, t_gl));
        app.frame_gl_ms.push_back(ms(t_gl, t_end));
      }
    }
    const bool last = opt.frames > 0 && f + 1 >= opt.frames && app.script.empty();
    std::string shot = std::move(app.screenshot_request);
    app.screenshot_request.clear();
    if (last && !opt.screenshot.empty()) shot = opt.screenshot;
    if (!shot.empty()) {
      read_framebuffer(w, h, px);
      if (!write_png(shot, w, h, px.data())) {
        std::fprintf(stderr, "error: cannot write '%s'\n", shot.c_str());
        rc = 1;
      }
    }
    glfwSwapBuffers(win);
    if (last) break;
  }
  if (!opt.dump_state.empty()) {
    std::ofstream out(opt.dump_state, std::ios::binary);
    out << app.state_json();
    if (!out) {
      std::fprintf(stderr, "error: cannot write '%s'\n", opt.dump_state.c_str());
      rc = rc ? rc : 1;
    }
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(win);
  glfwTerminate();
  return rc;
}

}  // namespace stretto::gui
