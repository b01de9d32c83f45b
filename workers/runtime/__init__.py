"""The runtime: the job-type registry, pools (django-q2 clusters under a supervisor), the control
process and its registered sweeps, the context a handler runs in, dispatch and replay. It knows the
engine (``jobs``) and nothing above it: the apps above register job types, sweeps and hooks."""
