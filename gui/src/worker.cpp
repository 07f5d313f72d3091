// The re-simulation worker (see worker.h).
#include "stretto/gui/worker.h"

#include <chrono>
#include <future>
#include <utility>

#include "stretto/sim/warnings.h"

namespace stretto::gui {

SpareStorage::Spare SpareStorage::take() {
  std::lock_guard lk(mu_);
  return std::exchange(spare_, Spare{});
}

void SpareStorage::give_back(Snapshot& s) {
  Spare given{std::move(s.session), std::move(s.result.program), std::move(s.program_lineage),
              std::move(s.timeline), std::move(s.lanes_lineage)};
  {
    std::lock_guard lk(mu_);
    std::swap(spare_, given);
  }
  // (what was here before is freed outside the lock)
}

std::shared_ptr<Snapshot> SpareStorage::make(const std::shared_ptr<SpareStorage>& spares) {
  return std::shared_ptr<Snapshot>(new Snapshot, [spares](Snapshot* s) {
    spares->give_back(*s);
    delete s;
  });
}

SimWorker::SimWorker() : thread_([this] { loop(); }) {}

SimWorker::~SimWorker() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t SimWorker::submit(std::string text, std::string file, std::string base_dir,
                           sim::Granularity granularity) {
  uint64_t g;
  {
    std::lock_guard lk(mu_);
    g = ++next_gen_;
    ++counts_.submitted;
    if (queued_) ++counts_.superseded;
    queued_ = Request{std::move(text), std::move(file), std::move(base_dir), g, granularity};
  }
  cv_.notify_all();
  return g;
}

std::optional<Outcome> SimWorker::take() {
  std::lock_guard lk(mu_);
  std::optional<Outcome> o = std::move(done_);
  done_.reset();
  return o;
}

bool SimWorker::busy() const {
  std::lock_guard lk(mu_);
  return running_ || queued_.has_value();
}

SimWorker::Counts SimWorker::counts() const {
  std::lock_guard lk(mu_);
  return counts_;
}

std::pair<std::string, double> SimWorker::progress() const {
  std::lock_guard lk(mu_);
  return {phase_, fraction_};
}

Outcome SimWorker::run(const std::string& text, const std::string& file,
                       const std::string& base_dir, uint64_t generation, const sim::SimOptions& opt,
                       const Snapshot* prev, sim::Resimulator* resim,
                       const std::shared_ptr<SpareStorage>& spares) {
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o;
  o.generation = generation;
  bool recompiled = true;
  // The text parsed once: compared with the previous snapshot's outside "costmodel" (an
  // edit of the cost model alone re-costs), then parsed as a plan (or compiled).
  auto parsed = plan::JsonSource::parse(text, file);
  // What the snapshot let go last left (SpareStorage): storage for a cost-model edit.
  SpareStorage::Spare spare = spares ? spares->take() : SpareStorage::Spare{};
  std::shared_ptr<const plan::JsonSource> source =
      parsed ? std::make_shared<const plan::JsonSource>(std::move(*parsed)) : nullptr;
  auto s = [&]() -> Expected<sim::Session> {
    if (!parsed) return fail(parsed.error());
    if (prev && prev->file == file && prev->source &&
        plan::same_but_costmodel(source->root(), prev->source->root())) {
      // Only "costmodel" differs from the previous text, which parsed: its section alone
      // (a change of kernel_style eager changes the saved activations: a compile).
      auto spec = plan::parse_costmodel(*source);
      if (!spec) return fail(spec.error());
      if (plan::eager_kernel_style(*spec) !=
          plan::eager_kernel_style(prev->session->compiled().plan.costmodel))
        return sim::Session::from_source(*source, base_dir);
      sim::Session copy = *prev->session;
      if (auto ok = copy.set_costmodel(*spec, std::move(spare.session)); !ok)
        return fail(ok.error());
      recompiled = false;
      return copy;
    }
    return sim::Session::from_source(*source, base_dir);
  }();
  const auto t_prepared = std::chrono::steady_clock::now();
  if (!s) {
    o.diags = std::move(s.error());
  } else {
    // A cost-model edit re-costs the previous program instead of building it again (and the
    // worker's engine re-runs its preparation of that program), into the spare storage when
    // it has that program's structure.
    const sim::Result* previous = prev && !recompiled ? &prev->result : nullptr;
    auto same_lineage = [](const std::shared_ptr<const void>& a,
                           const std::shared_ptr<const void>& b) { return a && a == b; };
    engine::Program* storage =
        previous && same_lineage(spare.program_lineage, prev->program_lineage) ? &spare.program
                                                                               : nullptr;
    auto r = resim      ? resim->simulate(s->compiled(), s->cost_model(), opt, previous, storage)
             : previous ? s->simulate(opt, *previous)
                        : s->simulate(opt);
    if (!r) {
      o.diags = std::move(r.error());
    } else {
      auto snap = spares ? SpareStorage::make(spares) : std::make_shared<Snapshot>();
      snap->text = text;
      snap->file = file;
      snap->source = std::move(source);
      snap->recompiled = recompiled;
      snap->engine_rerun = resim && resim->reused();
      snap->replayed_devices =
          resim ? resim->replayed_devices() : static_cast<uint32_t>(r->devices.size());
      snap->allocator_replays = resim ? resim->allocator_replays() : snap->replayed_devices;
      snap->sorted_devices = resim ? resim->sorted_devices() : snap->replayed_devices;
      auto lineage = [] {
        return std::static_pointer_cast<const void>(std::make_shared<const char>(0));
      };
      snap->program_lineage = resim && resim->recosted() ? prev->program_lineage : lineage();
      auto session = std::make_shared<sim::Session>(std::move(*s));
      snap->result = std::move(*r);
      const compiler::CompiledPlan& cp = session->compiled();
      const auto t_lanes = std::chrono::steady_clock::now();
      // The pipeline metrics on two more threads while this one lays out the lanes (which cost
      // about a third of them): all only read the result (the machine has cores to spare while
      // the UI thread waits for vsync).
      auto pipeline = std::async(std::launch::async, [&] { return sim::pipeline_metrics(cp, snap->result, 2); });
      // A cost-model edit keeps the DAG (cp is a copy of prev's with another cost model) and,
      // usually, the program's structure: the previous lanes are retimed.
      std::optional<Timeline> retimed;
      if (prev && !recompiled)
        retimed = retime_timeline(same_lineage(spare.lanes_lineage, prev->lanes_lineage)
                                      ? std::move(spare.timeline)
                                      : prev->timeline,
                                  prev->result, snap->result, cp);
      snap->timeline = retimed ? std::move(*retimed) : build_timeline(snap->result, cp);
      snap->lanes_retimed = retimed.has_value();
      snap->lanes_lineage = retimed ? prev->lanes_lineage : lineage();
      snap->pipeline = pipeline.get();
      snap->prepare_ms = std::chrono::duration<double, std::milli>(t_prepared - t0).count();
      snap->lanes_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_lanes).count();
      o.diags = cp.warnings;
      // The warnings `simulate` prints (unused devices, imbalance, fold hint, low coverage).
      for (sim::Warning& w : sim::result_warnings(cp, snap->result, opt.fold_replicas)) {
        o.diag_codes.resize(o.diags.size());
        o.diags.push_back(std::move(w.diag));
        o.diag_codes.push_back(std::move(w.code));
      }
      snap->session = std::move(session);
      snap->wall_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      o.snapshot = std::move(snap);
    }
  }
  o.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return o;
}

void SimWorker::loop() {
  for (;;) {
    Request req;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || queued_.has_value(); });
      if (stop_) return;
      req = std::move(*queued_);
      queued_.reset();
      ++counts_.run;
      running_ = true;
      phase_ = "compiling";
      fraction_ = 0;
    }
    sim::SimOptions opt;
    // The memory panel derives its curves per category from the program and timings
    // (sim::memory_by_category) for the device shown; the engine's total curves of every
    // device are not needed.
    opt.memory_curves = false;
    opt.granularity = req.granularity;  // as `simulate --granularity`
    // The reserved-memory replay on two threads (the worker's and one more): the edit waits on
    // it, and the Result is the same for any count.
    opt.threads = 2;
    opt.progress = [this](std::string_view phase, double f) {
      std::lock_guard lk(mu_);
      phase_ = std::string(phase);
      fraction_ = f;
    };
    Outcome o = run(req.text, req.file, req.base_dir, req.generation, opt, last_good_.get(),
                    &resim_, spares_);
    if (o.snapshot) last_good_ = o.snapshot;
    {
      std::lock_guard lk(mu_);
      // A newer outcome supersedes; an older finished one is never published over a newer.
      if (!done_ || done_->generation < o.generation) done_ = std::move(o);
      running_ = false;
      phase_.clear();
    }
  }
}

}  // namespace stretto::gui
