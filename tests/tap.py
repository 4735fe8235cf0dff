"""The Python tests' one TAP producer: a line per check, the details of a
failed one as comments, the plan up front when the test knows it and at the
end otherwise. A run that checked nothing fails."""
import sys

DETAIL_LINES = 40  # the end of a log says why; all of it buries the result


class Tap:
    def __init__(self, planned=None):
        self.n = 0
        self.failed = 0
        self.planned = planned
        if planned is not None:
            print(f"1..{planned}", flush=True)

    def ok(self, cond, name, detail=None):
        self.n += 1
        if not cond:
            self.failed += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond and detail:
            for line in str(detail).rstrip().splitlines()[-DETAIL_LINES:]:
                print(f"# {line}", flush=True)
        return cond

    def diag(self, msg):
        for line in str(msg).rstrip().splitlines():
            print(f"# {line}", flush=True)

    def bail(self, why):
        print(f"Bail out! {why}", flush=True)
        sys.exit(1)

    def done(self):
        if self.planned is None:
            print(f"1..{self.n}", flush=True)
        sys.exit(1 if self.failed or not self.n else 0)
