// Package ingress is the client side of the data plane: the fasthttp listener of the OpenAI API
// (validation, request IDs, deadlines, the answer before commit), the Exchange through which a
// request supervisor drives its request (Dispatcher, Command, Attempt, Answer), the goroutine
// that carries each planned attempt out through transport.Run (the one attempt runner, shared
// with probes and preflight), the relay that copies a committed stream to its client byte for
// byte, the assembly of a non-streaming answer, and the disconnect watcher. It never imports
// actors: the supervisor reaches it through Dispatcher.
package ingress
