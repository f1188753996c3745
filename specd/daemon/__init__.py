"""The daemon: scheduler, health monitor, profile/unit watcher, the OpenAI proxy with its drain
around restarts, metrics, the control socket, notifications and the status page (`web/`).

May import everything below it: `specd.deploy`, `specd.traffic`, `specd.unit`, `specd.profiles`,
`specd.gpu`; it loads `specd.tune` lazily: for the nightly run, for the tuner's decisions in
notifications, and through `web/` (loaded only when `[daemon] http_listen` is set), which shows
the tuner's results and runs its bench.
"""
