"""The daemon: wiring (app), health monitor, profile/unit watcher, metrics, the control socket
with the drain around restarts, the blue-green retarget and routing's reroute, the history observer and
notifications, and when the nightly run and the pins' check fire. It runs the proxy
(`specd.proxy`, the request path) and follows the slot pointer for it.

May import everything below it: `specd.proxy`, `specd.deploy`, `specd.traffic`, `specd.unit`,
`specd.profiles`, `specd.gpu`; it loads `specd.tune` lazily for the nightly run. The status page
(`specd.web`, above this layer) is handed in by `specd daemon` as a factory.
"""
