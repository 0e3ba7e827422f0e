package etcdtest

import (
	"context"
	"testing"
)

func TestDataSurvivesPauseAndResume(t *testing.T) {
	s := Start(t)
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
