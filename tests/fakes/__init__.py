"""Stand-ins for the programs k4w drives, used at the process boundary only.

Every module here replaces one real program the tests cannot (or must not) run, and says which:
  vagrant.py          the `vagrant` executable (HashiCorp Vagrant 2.x CLI), put first on PATH
  cluster_world.py    Vagrant, the guests and the Hyper-V host, in-process (the driver seams)
  cluster_answers.py  what the guests of a healthy cluster answer (shared by the two above)
  packer.py           the `packer` executable (HashiCorp Packer 1.6.x CLI), put first on PATH
  windows_host.py     a Windows Server 1803 node behind testinfra's WinRM backend

Recorded outputs the fakes replay live beside them (packer_transcripts/, vagrant_outputs/).
No test_*.py lives here: tests/cli/test_collection.py checks that.

This file imports nothing: the fake `vagrant` imports the package under `python -S` (no
site-packages), which saves the ~0.2 s a site import costs on each of its many calls.
"""
