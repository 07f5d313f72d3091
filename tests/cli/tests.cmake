# tests for cli (owner fills in)
