// Package swebench turns SWE-bench-style datasets into samples.
//
// A dataset is JSONL, one task instance a line, with SWE-bench's fields:
// instance_id, repo, base_commit, problem_statement, FAIL_TO_PASS,
// PASS_TO_PASS (each a list of test ids, or, as SWE-bench ships them, a
// string holding a JSON list), and optionally image, version,
// environment_setup_commit, test_patch, and actloop's test_cmd. Each row
// becomes a schema.Sample whose task is the problem statement, whose setup
// checks out base_commit in the workspace (a SWE-bench image holds the
// repository at /testbed), and whose eval restores the test files, applies
// test_patch and runs the tests with the repository's SWE-bench test command
// (SpecFor), printing the lines its log format's parser reads; the
// env-worker reads those for the per-test outcome and the reward (see
// internal/testlog).
package swebench
