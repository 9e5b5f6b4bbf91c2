// Package tests holds Narwhal's end-to-end tests: a real router (node) in front of
// simulated fleets (bench/sim), driven over loopback HTTP like a client would, with faults
// injected in the simulator rather than mocked in the router.
package tests
