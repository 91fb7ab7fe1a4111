"""Command-line front ends: parse, call the library, render. No analysis logic here."""
