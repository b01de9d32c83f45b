"""gunicorn's settings for the console and the API: ``gunicorn -c config/gunicorn_conf.py``
(``scripts/serve`` runs exactly that; docs/operations.md, "Processes").

Threaded workers (``gthread``): each worker process serves ``LEITSTAND_WEB_THREADS`` requests at
once, so a console's live parts (a request per open page every 5 s) and a slow export do not hold
a whole process each. Every value can be set from the environment.
"""

import multiprocessing
import os

from config.env import env_int, env_list, env_str

wsgi_app = "config.wsgi:application"
bind = env_list("LEITSTAND_WEB_BIND", ["127.0.0.1:8000"], doc="where the web server listens, comma-separated")
workers = env_int(
    "LEITSTAND_WEB_WORKERS",
    2 * multiprocessing.cpu_count() + 1,  # gunicorn's own advice
    minimum=1,
    doc="web server processes",
)
worker_class = "gthread"
threads = env_int("LEITSTAND_WEB_THREADS", 4, minimum=1, doc="requests each web server process serves at once")
timeout = env_int("LEITSTAND_WEB_TIMEOUT_SECONDS", 30, minimum=1, doc="a request longer than this is killed")
graceful_timeout = 30  # SIGTERM: requests in flight finish, within this
keepalive = 5
# A worker is replaced after this many requests (and a random part of the jitter): nothing grows forever.
max_requests = 10_000
max_requests_jitter = 1_000
# The proxy in front (TLS, the client's address in X-Forwarded-For) — by default only on this host.
forwarded_allow_ips = env_str(
    "LEITSTAND_WEB_FORWARDED_ALLOW_IPS", "127.0.0.1", doc="proxies whose X-Forwarded-For and -Proto are believed"
)
accesslog = (
    env_str("LEITSTAND_WEB_ACCESS_LOG", "-", doc="the access log's file (`-`: standard output; empty: none)") or None
)
errorlog = "-"
proc_name = "leitstand-web"
# gunicorn's own lines (the error log, the access log) in the format of the application's
# (LEITSTAND_LOG_FORMAT, jobs/logs.py): with "json", one JSON object per line from every process.
if os.environ.get("LEITSTAND_LOG_FORMAT", "plain").strip().lower() == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "jobs.logs.JsonFormatter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
            "error_console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": False},
            # A configured logging turns gunicorn's access log on: kept quiet when it is off.
            "gunicorn.access": {
                "level": "INFO" if accesslog else "WARNING",
                "handlers": ["console"],
                "propagate": False,
            },
        },
        "root": {"level": "INFO", "handlers": ["console"]},
    }
# gunicorn's control socket (gunicornc: add workers, reload) is off: nothing here uses it, and two
# servers on one host would share its default path ($HOME/.gunicorn/gunicorn.ctl).
control_socket_disable = True
