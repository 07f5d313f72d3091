# tests for schedules (owner fills in)
