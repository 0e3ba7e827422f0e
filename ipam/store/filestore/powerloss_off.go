//go:build !crashpoints

package filestore

// notePowerLoss is a no-op outside crash-test builds (see
// powerloss_on.go).
func notePowerLoss(string, durability) {}

// noteLinkLoss is a no-op outside crash-test builds.
func noteLinkLoss(string) {}
