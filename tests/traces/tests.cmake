# tests for traces (owner fills in)
