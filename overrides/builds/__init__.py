"""The builds compared: interpreters, kept copies of torch, each side's view of its libraries, one start-up path for every side."""
