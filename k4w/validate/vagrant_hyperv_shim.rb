# k4w: the Vagrant home Vagrantfile `invoke validate` loads (VAGRANT_HOME of a throwaway folder)
# so that Vagrant's own `vagrant validate` checks the cluster Vagrantfile with the Hyper-V provider
# on a host that is not Windows. It bypasses exactly one thing: the provider's host check.
#
# Vagrant checks a machine's provider with `usable?(true)` before it loads the machine's config
# (hashicorp/vagrant@v2.3.4 (986a0173) lib/vagrant/vagrantfile.rb, machine_config), and the Hyper-V provider's
# usable? raises WindowsRequired off Windows/WSL, AdminRequired without Hyper-V rights, and
# PowerShellRequired without powershell (plugins/providers/hyperv/provider.rb, self.usable?).
# None of those is about the Vagrantfile. Everything else is Vagrant's: option names (a misspelt
# one is "The following settings shouldn't exist"), the Hyper-V config's own validate
# (plugins/providers/hyperv/config.rb: vm_integration_services entries, auto start/stop actions),
# the core vm/ssh/synced-folder config. `vagrant validate --ignore-provider` would skip the
# provider's config instead (plugins/commands/validate/command.rb, mockup_providers!).
#
# Vagrant loads this file before the project's Vagrantfile (lib/vagrant/environment.rb,
# vagrantfile: the :home source), and its provider registry loads the provider class on first
# lookup (the block in plugins/providers/hyperv/plugin.rb), so the class is there to patch.
hyperv_provider = Vagrant.plugin("2").manager.providers[:hyperv]
abort "k4w validate shim: Vagrant has no hyperv provider" unless hyperv_provider
hyperv_provider[0].singleton_class.send(:define_method, :usable?) { |_raise_error = false| true }
