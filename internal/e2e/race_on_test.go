//go:build race

package e2e

// raceEnabled reports whether the tests run with the race detector; child
// processes are then built with it too.
const raceEnabled = true
