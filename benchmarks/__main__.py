"""Entry point for `python -m benchmarks`."""

from benchmarks.run import main

if __name__ == "__main__":
    raise SystemExit(main())
