"""The status page the daemon serves on `[daemon] http_listen`: one page and its JSON API.

Owns the page's assets (`static/`, shipped as package data: no CDN, works offline), the action
token and sessions (`auth`), the live event stream (`events`, server-sent events), what the page
shows (`views`: deployments and the timeline; `insights`: traffic, the last bench, GPUs) and the
actions it may take (`actions`: switch, rollback, pin, unpin, bench now). A front end like the
CLI: it may import every layer below it, the composition root (`specd.context`) included;
`specd daemon` hands `app.StatusPage` to the daemon as its page factory.
"""
