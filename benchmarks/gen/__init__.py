"""Load generators: functions run in the spawned pool processes, each returning a result dict."""
