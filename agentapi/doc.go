// Package agentapi is the agent's socket API, both halves: the answers'
// types (CheckReport, the qp-leaks report; Status), Handler, which answers
// the requests from a Source (the agent's history, a watch.State), and
// Ask, the client `rdmatool qp-leaks` asks a running agent with. Package
// query reads the qp-leaks question's parameters. What the socket serves,
// as an operator sees it, is docs/agent.md.
//
// The package serves and dials what it is given, and checks that a socket
// path is one a unix socket can have (CheckSocketPath, for the agent's
// socket and the client's): making the socket file (its mode, a stale
// socket left by an agent that died) and the server's timeouts are the
// daemon's (package agent). The client waits at most 30 seconds for each
// next part of an answer, however long its context allows. It imports no eBPF,
// Prometheus or systemd library, so a client links none of them.
//
// # Privileges
//
// None of its own: the agent's socket is 0600 and its user's (the unit's
// DynamicUser, or root for an agent started by hand), so asking it takes
// that user or root.
package agentapi
