"""A monotonic clock that a test moves by hand (``clock.now += 5``), for code that takes a clock."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
