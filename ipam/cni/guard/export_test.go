package guard

import "time"

// SetClock sets the guard's clock: the rulebook's graces (a claim's
// minute) pass in a test without waiting for them.
func SetClock(g *Guard, now func() time.Time) { g.now = now }
