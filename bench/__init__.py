"""`make bench`: Boxmaker's hot paths side by side with their peers, as ratios from one run."""
