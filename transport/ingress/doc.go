// Package ingress is the client side of the data plane: the fasthttp listener of the OpenAI API
// (validation, request IDs, deadlines, the answer before commit), the Exchange through which a
// request supervisor drives its request (Dispatcher, Command, Plan, Verdict), the attempt runner
// (prefill, handoff checks, decode to the first token; both legs at once for a concurrent
// connector), the relay that copies a committed stream to its client byte for byte, and the
// disconnect watcher. It never imports actors: the supervisor reaches it through Dispatcher.
package ingress
