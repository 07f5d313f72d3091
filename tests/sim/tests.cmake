# tests for sim (owner fills in)
