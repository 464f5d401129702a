//! Backend-specific tests: statement counts, completion inside the caller's transaction,
//! migration history, corrupt rows, two processes on one SQLite file.
