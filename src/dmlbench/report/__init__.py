"""What people read: terminal tables and summaries (HTML reports come with sweeps)."""
