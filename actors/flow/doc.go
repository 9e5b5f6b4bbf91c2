// Package flow decides which waiting request gets the next free engine slot when the fleet is
// full: the admission queue's policy.
//
// A request belongs to a flow: a tenant within a priority band. The queue serves
//
//   - bands strictly in order: nothing of a lower band leaves while a higher band waits for the
//     same engine;
//   - tenants within a band in proportion to their weights measured in estimated tokens (prompt
//     plus expected output), not in requests: start-time fair queuing over per-tenant virtual
//     token counters. A tenant that was idle re-enters at the band's current virtual time, so it
//     banks no credit, and a tenant alone in the queue takes every slot;
//   - a tenant's own requests earliest deadline first, then in arrival order.
//
// Under overload it sheds by documented rule (Push): a sheddable band never waits; a full queue
// displaces the newest request of the lowest band below the arrival's; a tenant over its own
// allowance is refused; a request whose deadline the queue's measured drain rate says it cannot
// meet is refused before it takes a slot, and one whose deadline passes while it waits leaves at
// the next Pop.
//
// Queue is a plain data structure with no goroutine and no lock: the pool actor is its only
// caller, so its only writer, and the clock comes in with every call. Table tests drive every
// rule without actors, sockets or sleeps.
package flow
