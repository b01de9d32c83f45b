"""The pipeline: crawling sources politely and safely, analysing candidate images against the protected
assets, and the records both produce. Built on the runtime; it never imports the apps above it and
announces a reported match through ``workers.runtime.hooks``."""
