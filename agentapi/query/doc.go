// Package query reads the parameters of the agent API's qp-leaks question
// (GET /v1/qp-leaks?dev=D&min_age=5s&rule=R&max_qp=D=N&no_probes=1&limit=N)
// into a leakwatch.Query. Its errors are the text of the agent's 400
// answers, so they read "agent: ..." as the API's other answers do, and
// quote what they refuse cut at 64 bytes (Quote).
//
// It needs no privileges and makes no system call.
//
// It is apart from package agentapi so that its fuzz target runs without
// net/http: Go instruments every package of a fuzz test's binary, and each
// one linked makes every input dearer to run.
package query
