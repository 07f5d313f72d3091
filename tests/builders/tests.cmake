# tests for builders (owner fills in)
