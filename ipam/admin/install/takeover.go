package install

import "github.com/safe-ipam/safe-ipam/ipam/admin/cninode"

// TakeoverMode installs safe-ipam as <bin>/calico-ipam, leaving every
// network config as it is: Calico's main plugin still sees an IPAM named
// calico-ipam and applies its annotations. safe-ipam then runs Calico's
// own <bin>/calico as its delegate, with argv[0] calico-ipam, so there is
// no second copy of Calico to keep in step with Calico upgrades.
type TakeoverMode struct{}

func (TakeoverMode) Name() string { return ModeTakeover }

func (TakeoverMode) Install(n Node, self string) (*Plan, error) {
	if err := n.checkDirs(); err != nil {
		return nil, refuse("%v", err)
	}
	confs, err := calicoConfs(n, true)
	if err != nil {
		return nil, err
	}
	if err := n.ownConflistInstalled(ModeTakeover); err != nil {
		return nil, err
	}
	for _, c := range confs {
		if !needsRoute(c) {
			return nil, refuse("%s routes its IPAM through safe-ipam (conflist mode): to switch to takeover mode, run safe-ipam uninstall, then install --mode=takeover (docs/install.md, \"Switching modes\")", c.Path)
		}
	}
	if err := requireFile(n.bin(CalicoIPAM), "Calico's IPAM, to be taken over"); err != nil {
		return nil, err
	}
	if err := requireFile(n.bin(CalicoBinary), "Calico's multi-call binary, the delegate"); err != nil {
		return nil, err
	}
	if mine, err := cninode.IsSafeIPAM(n.bin(CalicoBinary)); err != nil {
		return nil, refuse("%v", err)
	} else if mine {
		return nil, refuse("%s is safe-ipam, not Calico's binary", n.bin(CalicoBinary))
	}
	p := &Plan{}
	if err := installBuilds(p, n, n.bin(CalicoIPAM), self); err != nil {
		return nil, err
	}
	return p, nil
}

func (TakeoverMode) Uninstall(n Node) (*Plan, []string, error) {
	if err := n.checkDirs(); err != nil {
		return nil, nil, refuse("%v", err)
	}
	p := &Plan{}
	path := n.bin(CalicoIPAM)
	notes, err := uninstallFile(p, path, func() (bool, error) { return cninode.IsSafeIPAM(path) })
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	more, err := uninstallEtcdBuild(p, n)
	if err != nil {
		return nil, nil, refuse("%v", err)
	}
	return p, append(notes, more...), nil
}
