"""Reference solutions to the chapters' exercises, one module per chapter (same file name).

Each chapter imports its module when run with `--check-solutions` and runs its
`check_<name>` functions on them; tests/chapters/test_chapters.py does that for every chapter.
Try the exercises before you read these.
"""
