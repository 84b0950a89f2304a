"""Files: atomic writes, tables and their columns, the README snapshot, progress lines."""
