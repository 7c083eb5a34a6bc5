"""What the guests of a healthy cluster answer: part of the stand-ins for Vagrant and the guests.

Shared by the fake `vagrant` executable (vagrant.py) and the in-process FakeRemote
(cluster_world.py), so both fakes answer alike. Kept to the standard library: the fake
executable imports it under `python -S`.

Scenario (a dict, stored as JSON for the executable):
- "fail": [{"pattern": regex on the command, "times": n, "exit": code, "output": text}] injects
  failures (each entry fails its first `times` matches);
- "not_ready": {node: {"reason": ..., "message": ...}} keeps nodes NotReady;
- "unregistered": [node, ...] keeps nodes out of `kubectl get nodes`.
- "lost_token_answers": n makes the first n `kubeadm token create` store their token and then fail as a
  kube-apiserver restarting before its reply does ("connection refused"): the token exists, unreported.
The answers keep what a command leaves in the cluster in the scenario too: "bootstrap_tokens", the id of
each join token `kubeadm token create` made and no `delete secret bootstrap-token-<id>` removed yet, and
"token_descriptions", each one's --description (listed by `get secrets --field-selector type=...`).
"""

from __future__ import annotations

import base64
import json
import re
import shlex

TOKEN = "abcdef.0123456789abcdef"
# What the token controller puts in a service-account-token Secret: a JWT and the cluster CA.
SERVICE_ACCOUNT_TOKEN = "eyJhbGciOiJSUzI1NiJ9.fake-service-account-token.signature"
CLUSTER_CA = "-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"
CA_HASH = "sha256:" + "1" * 64


def check_failure(scenario: dict, command: str) -> tuple[int, str] | None:
    for rule in scenario.get("fail", []):
        if rule.get("times", 1) > 0 and re.search(rule["pattern"], command):
            rule["times"] = rule.get("times", 1) - 1
            return rule.get("exit", 1), rule.get("output", "injected failure")
    return None


def answer(scenario: dict, machines: list[dict], command: str) -> tuple[int, str]:
    failed = check_failure(scenario, command)
    if failed:
        return failed
    master = next(m for m in machines if m["role"] == "master")
    tokens = scenario.setdefault("bootstrap_tokens", [])
    if "kubeadm token create" in command:
        # A fresh token each time, as kubeadm makes one: the first is TOKEN, the next ones abcd01, ...
        made = scenario["tokens_made"] = scenario.get("tokens_made", 0) + 1
        token = TOKEN if made == 1 else f"abcd{made - 1:02d}" + TOKEN[6:]
        tokens.append(token[:6])
        words = shlex.split(command)
        if "--description" in words:
            scenario.setdefault("token_descriptions", {})[token[:6]] = words[words.index("--description") + 1]
        if scenario.get("lost_token_answers", 0) > 0:
            scenario["lost_token_answers"] -= 1
            return 1, ('error: failed to create or update bootstrap token: Post "https://192.168.250.10:6443/api/v1/'
                       'namespaces/kube-system/secrets?timeout=10s": dial tcp 192.168.250.10:6443: connect: connection refused\n')
        return 0, f"kubeadm join {master['ip']}:6443 --token {token} --discovery-token-ca-cert-hash {CA_HASH}\n"
    deleted = re.search(r"-n kube-system delete secret bootstrap-token-([a-z0-9]{6})\b", command)
    if deleted:
        scenario["bootstrap_tokens"] = [t for t in tokens if t != deleted[1]]
        return 0, f'secret "bootstrap-token-{deleted[1]}" deleted\n'
    if "get secrets --field-selector type=bootstrap.kubernetes.io/token" in command:
        # kubectl's jsonpath: each Secret's name, a tab and its data.description (base64, as the API holds it)
        described = scenario.get("token_descriptions", {})
        return 0, "".join(f"bootstrap-token-{t}\t{base64.b64encode(described.get(t, '').encode()).decode()}\n"
                          for t in tokens)
    if "get nodes -o json" in command:
        items = []
        for m in machines:
            if m["name"] in scenario.get("unregistered", []):
                continue
            bad = scenario.get("not_ready", {}).get(m["name"])
            cond = {"type": "Ready", "status": "False", **bad} if bad else {"type": "Ready", "status": "True"}
            items.append({"metadata": {"name": m["name"]}, "status": {"conditions": [cond]}})
        return 0, json.dumps({"items": items})
    rollout = re.search(r"rollout status (\S+)", command)
    if rollout:
        return 0, f'{rollout[1]} successfully rolled out\n'
    if re.search(r"get secret \S+-token -o json", command):
        if scenario.get("tokens_pending", 0) > 0:   # the token controller has not filled it yet
            scenario["tokens_pending"] -= 1
            return 0, json.dumps({"data": {}})
        b64 = lambda text: base64.b64encode(text.encode()).decode()
        return 0, json.dumps({"data": {"token": b64(SERVICE_ACCOUNT_TOKEN), "ca.crt": b64(CLUSTER_CA), "namespace": b64("kube-system")}})
    if "get deployment" in command:
        return 0, json.dumps({"status": {"availableReplicas": 1}})
    if "cat /etc/kubernetes/admin.conf" in command:
        return 0, "apiVersion: v1\nkind: Config\nclusters: []\n"
    return 0, ""
