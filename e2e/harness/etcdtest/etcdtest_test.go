package etcdtest

import (
	"context"
	"testing"
)

func TestDataSurvivesPauseAndResume(t *testing.T) {
	checkSurvivesPause(t, Start(t))
}

// checkSurvivesPause writes through the shared client, stops and starts
// the server, and reads the value back.
func checkSurvivesPause(t *testing.T, s *Server) {
	t.Helper()
	if _, err := s.Client().Put(context.Background(), "/a", "b"); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Dump("/")
	if err != nil || got["/a"] != "b" {
		t.Fatalf("after resume: %v, %v", got, err)
	}
}
