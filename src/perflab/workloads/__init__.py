"""Model code shared by catalog puzzles (torch imported lazily inside functions)."""
