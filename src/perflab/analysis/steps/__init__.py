"""How a trace's time is cut into steps and windows, and what the recording itself holds."""
