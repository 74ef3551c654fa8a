"""Results records: one ``results.jsonl`` per run directory, each line verifiable on its own.

The first line of every (re)start is a header (config hash, git commit, library versions,
hardware); then one JSON object per measurement; a run that ends through attnbench.cli
appends a footer (status completed | interrupted | failed, wall_s, and the error of a failed
run). Secret-looking values from the environment are masked before anything is written
(attnbench.redact).

Integrity (read back by ``scan``, line by line, each line decoded as UTF-8 text, never by
``json.loads`` guessing an encoding from bytes):
- every line ends in a CRC-32 of the rest of the line (``"crc32": "89abcdef"``), so a line
  garbled on disk is told apart from a good one even when it is still valid JSON;
- the records of one experiment cell are written in one ``write`` together with a commit line
  (``{"type": "commit", "cell": KEY, "coords": {...}, "records": N}``) that follows its N
  record lines: a cell is done only when its commit line and all N records are whole;
- a damaged line (cut short, garbled, not UTF-8, NUL bytes, not a JSON object) and the records
  of a cell that is not whole are named (line number, what is wrong, the cell); ``Scan.repair``
  rewrites the file atomically without them (they go to ``results.jsonl.damaged``, nothing is
  thrown away). A cell that loses any line to a repair loses all of them and runs again, so a
  rerun redoes exactly those cells and never appends to a torn line. A second copy of a whole
  cell or of one of its records is removed and the cell stays recorded once.
- every line, the header included, is appended with one ``write``; a write the disk cannot take
  (ENOSPC) is cut back off the file (``DiskFull``), so no line is ever left torn by it.
Lines written before this format (no checksum) are read as they are.

Here: reading (read.py), what a line holds (lines.py), the integrity checks (integrity.py),
the writing (write.py); a run directory (rundir.py), masking secrets (redact.py), intervals (stats.py).
"""
