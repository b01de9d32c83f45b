"""The console's date and time formats (FORMAT_MODULE_PATH): ISO dates and times with seconds, as
operators compare them with logs — not "Dec. 1, 2026, 9:44 a.m.", which hides the seconds."""

DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s"
