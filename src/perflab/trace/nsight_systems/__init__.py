"""The parts of the Nsight Systems reader: SQLite exports and .nsys-rep files, their tables, names and checks, capture ranges."""
