# tests for costmodel (owner fills in)
