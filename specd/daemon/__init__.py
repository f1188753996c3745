"""The daemon: scheduler, health monitor, profile/unit watcher, the OpenAI proxy with its drain
around restarts, metrics and the control socket.

May import everything below it: `specd.deploy`, `specd.traffic`, `specd.unit`, `specd.profiles`,
`specd.gpu`; it loads `specd.tune` lazily for the nightly run.
"""
