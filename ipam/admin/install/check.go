package install

import (
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// checkConfigs refuses a plan after which the plugin would refuse a
// network config it runs for (every ADD and DEL would fail, code 7):
// each Calico config (confs) whose IPAM goes through safe-ipam once p lands,
// with the node settings it leaves, parsed by the CNI binary's own
// parser as the runtime hands it over. It says whether any of them keeps
// its records in etcd.
func (n Node) checkConfigs(p *Plan, m Mode, confs []*cninode.Conf, settings []byte) (etcd bool, err error) {
	for _, c := range confs {
		after := cninode.ParseConf(c.Path, p.content(c.Path, c.Raw), c.Perm)
		if after.Err != nil {
			return false, refuse("%v", after.Err)
		}
		for i, pl := range after.Plugins {
			if !pl.RoutedThroughSafeIPAM() && !(m.Name() == ModeTakeover && pl.UsesCalicoIPAM()) {
				continue
			}
			stdin, err := after.PluginConfig(i)
			var cfg *config.Config
			if err == nil {
				cfg, err = config.ParseWithNodeSettings(stdin, settings, n.settingsPath())
			}
			if err != nil {
				return false, refuse("safe-ipam would refuse every CNI call of network %q (%s, plugin %d): %v", after.Network, c.Path, i, err)
			}
			etcd = etcd || cfg.Store.Type == config.StoreEtcd
		}
	}
	return etcd, nil
}

// content is what path holds once p lands: the data p writes there, else
// cur.
func (p *Plan) content(path string, cur []byte) []byte {
	for _, s := range p.Steps {
		if s.Path == path && s.data != nil {
			cur = s.data
		}
	}
	return cur
}
