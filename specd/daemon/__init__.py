"""The daemon: scheduler, health monitor, profile/unit watcher, the OpenAI proxy with its drain
around restarts, metrics, the control socket, the history observer and notifications.

May import everything below it: `specd.deploy`, `specd.traffic`, `specd.unit`, `specd.profiles`,
`specd.gpu`; it loads `specd.tune` lazily for the nightly run. The status page (`specd.web`, above
this layer) is handed in by `specd daemon` as a factory.
"""
