"""deploy/ without Docker or Kubernetes: the files parse and agree with the code (settings,
web port, probes, console script, exported metrics)."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from compose_spec import PyCompose

import stream_rater.service.metrics
from stream_rater.config.ladders import load_ladders
from stream_rater.config.settings import Settings, env_name
from stream_rater.kafka import bootstrap_servers
from stream_rater.store.redis.cluster import parse_cluster_url
from tests.unit.project.deploy_files import exported_series, load_yaml, promql_metric_names

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
WEB_PORT = Settings().web_port
SETTINGS_ENV = {env_name(f.name) for f in fields(Settings)}
CURRENT_API_VERSIONS = {
    "v1",
    "apps/v1",
    "autoscaling/v2",
    "policy/v1",
    "batch/v1",
    "keda.sh/v1alpha1",
    "kustomize.config.k8s.io/v1beta1",
}
#: Kinds of custom resources: no Kubernetes schema, checked structurally (`SCALED_OBJECT_SCHEMA`).
CUSTOM_KINDS = {"ScaledObject"}


def k8s_objects() -> list[dict]:
    return [
        doc
        for path in sorted(K8S.rglob("*.yaml"))
        for doc in load_yaml(path)
        if doc.get("kind") != "Kustomization"
    ]


def k8s_object(kind: str, name: str) -> dict:
    [found] = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def compose(name: str = "docker-compose.yml") -> dict:
    [doc] = load_yaml(DEPLOY / name)
    return doc


def dockerfile() -> str:
    return (DEPLOY / "Dockerfile").read_text()


def grafana_dashboard() -> dict:
    return json.loads((DEPLOY / "grafana" / "dashboards" / "stream-rater.json").read_text())


def check_env(names: dict[str, str]) -> None:
    """Every STREAM_RATER_* name is a setting or a ladder variable the ladder loader accepts."""
    ours = {k: v for k, v in names.items() if k.startswith("STREAM_RATER_")}
    unknown = {k for k in ours if k not in SETTINGS_ENV and not k.startswith("STREAM_RATER_LADDER_")}
    assert not unknown, f"not settings: {sorted(unknown)}"
    load_ladders(None, ours)  # raises LadderConfigError on a bad ladder variable


def test_every_deploy_file_parses():
    """Every YAML, JSON and TOML file under deploy/ parses."""
    parsed = 0
    for path in sorted(DEPLOY.rglob("*")):
        if path.suffix in (".yml", ".yaml"):
            assert load_yaml(path), path
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".toml":
            tomllib.loads(path.read_text())
        else:
            continue
        parsed += 1
    assert parsed >= 12


def test_compose_runs_kafka_kraft_redis_scalable_workers_prometheus_grafana():
    """Compose has Apache Kafka in KRaft mode, Redis, workers built from deploy/Dockerfile without a fixed host port, the checkpoint loop, Prometheus and Grafana."""
    services = compose()["services"]
    assert set(services) == {"kafka", "redis", "worker", "checkpointer", "prometheus", "grafana"}
    assert services["checkpointer"]["command"][:3] == ["stream-rater", "checkpoint", "--loop"]
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    worker = services["worker"]
    context = (DEPLOY / worker["build"]["context"]).resolve()  # relative to the compose file
    assert context == ROOT and (context / worker["build"]["dockerfile"]) == DEPLOY / "Dockerfile"
    assert worker["ports"] == [str(WEB_PORT)], "a fixed host port would prevent --scale worker=N"
    assert "container_name" not in worker


def test_compose_worker_environment_uses_real_settings_and_valid_ladders():
    """The compose worker's STREAM_RATER_* variables are Settings fields or valid ladder definitions."""
    env = compose()["services"]["worker"]["environment"]
    check_env(env)
    assert {"ffa", "drop-in"} <= set(load_ladders(None, env))
    assert env[env_name("web_port")] == str(WEB_PORT) and env[env_name("web_host")] == "0.0.0.0"


def test_kubernetes_config_keys_are_real_settings():
    """The ConfigMap and Secret that the worker loads with envFrom hold only Settings variables."""
    config = k8s_object("ConfigMap", "stream-rater-config")["data"]
    secret = k8s_object("Secret", "stream-rater-secrets")["stringData"]
    check_env({**config, **secret})
    assert set(config) | set(secret) <= SETTINGS_ENV
    assert config[env_name("web_port")] == str(WEB_PORT)
    assert env_name("redis_url") in secret and env_name("kafka_sasl_password") in secret


def test_kubernetes_ladders_file_is_mounted_and_loads():
    """The kustomize ladders file loads with the ladder loader and is mounted where STREAM_RATER_LADDERS_FILE points."""
    assert {"ffa", "drop-in"} <= set(load_ladders(str(K8S / "base" / "ladders.toml"), {}))
    [kustomization] = load_yaml(K8S / "base" / "kustomization.yaml")
    [generator] = kustomization["configMapGenerator"]
    deployment = k8s_object("Deployment", "stream-rater-worker")
    pod = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == generator["name"]]
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    ladders_file = k8s_object("ConfigMap", "stream-rater-config")["data"][env_name("ladders_file")]
    assert ladders_file == f"{mount['mountPath']}/{generator['files'][0]}"


def test_worker_deployment_probes_ports_and_config():
    """The worker Deployment probes /readyz and /healthz on the web port, loads the config and secret, and runs as non-root."""
    deployment = k8s_object("Deployment", "stream-rater-worker")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [port] = container["ports"]
    assert port["containerPort"] == WEB_PORT
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["args"] == ["worker"]
    sources = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
    assert sources == {"stream-rater-config", "stream-rater-secrets"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(WEB_PORT)
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    service = k8s_object("Service", "stream-rater-worker")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["port"] == WEB_PORT


def test_stop_grace_periods_cover_the_worker_stop_timeout():
    """Kubernetes and compose wait at least the worker's ``stop_timeout`` (default, or as
    configured) before they kill it, so the worker always ends its stop by itself."""
    config = k8s_object("ConfigMap", "stream-rater-config")["data"]
    deployment = k8s_object("Deployment", "stream-rater-worker")
    k8s_timeout = float(config.get(env_name("stop_timeout"), Settings().stop_timeout))
    assert k8s_timeout <= deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    worker = compose()["services"]["worker"]
    compose_timeout = float(worker["environment"].get(env_name("stop_timeout"), Settings().stop_timeout))
    assert compose_timeout <= float(worker["stop_grace_period"].removesuffix("s"))


def test_kubernetes_objects_use_current_api_versions_and_existing_resources():
    """Every Kubernetes object uses a current API version and every kustomize resource exists."""
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in load_yaml(path):
            assert doc["apiVersion"] in CURRENT_API_VERSIONS, (path, doc["apiVersion"])
            for resource in doc.get("resources", []):
                assert (path.parent / resource).exists(), (path, resource)


def test_autoscaler_targets_the_worker_within_the_partition_count():
    """The optional HPA scales the worker Deployment on consumer lag and never beyond the partition count."""
    hpa = k8s_object("HorizontalPodAutoscaler", "stream-rater-worker")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "stream-rater-worker")
    partitions = int(k8s_object("ConfigMap", "stream-rater-config")["data"][env_name("partitions")])
    assert hpa["spec"]["maxReplicas"] <= partitions
    assert k8s_object("Deployment", "stream-rater-worker")["spec"]["replicas"] <= partitions
    [metric] = hpa["spec"]["metrics"]
    [lag] = stream_rater.service.metrics.CONSUMER_LAG.describe()
    assert metric["pods"]["metric"]["name"] == lag.name


def test_dockerfile_runs_the_worker_as_non_root_with_a_health_check():
    """The image copies existing files, installs no local extra, runs `stream-rater worker` as non-root and health-checks /healthz on the web port."""
    text = dockerfile()
    for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", text, flags=re.M):
        for source in sources.split():
            assert (ROOT / source).exists(), source
    assert "[local]" not in text and "calfkit" not in text
    assert re.search(r"^USER (?!root|0\b)\S+", text, flags=re.M)
    assert re.search(rf"^EXPOSE {WEB_PORT}$", text, flags=re.M)
    assert f"STREAM_RATER_WEB_PORT={WEB_PORT}" in text and "STREAM_RATER_WEB_HOST=0.0.0.0" in text
    assert re.search(r"^HEALTHCHECK .*\n?.*/healthz", text, flags=re.M)
    assert 'ENTRYPOINT ["stream-rater"]' in text and 'CMD ["worker"]' in text
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "stream-rater" in scripts


def test_prometheus_discovers_every_compose_worker_on_the_web_port():
    """Prometheus finds the workers by DNS service discovery of the compose service on the web port."""
    [config] = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    job, checkpoints = config["scrape_configs"]
    assert checkpoints["static_configs"] == [{"targets": ["checkpointer:6067"]}]
    [sd] = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["type"] == "A" and sd["port"] == WEB_PORT
    assert job["metrics_path"] == "/metrics"
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


def test_grafana_is_provisioned_with_the_datasource_and_dashboard_it_uses():
    """Grafana's provisioned datasource is the one the panels name, and the dashboard provider reads the mounted folder."""
    [datasources] = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    [source] = datasources["datasources"]
    panel_sources = {p["datasource"]["uid"] for p in grafana_dashboard()["panels"] if "datasource" in p}
    assert panel_sources == {source["uid"]}
    [providers] = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "stream-rater.yml")
    folder = providers["providers"][0]["options"]["path"]
    assert f"./grafana/dashboards:{folder}:ro" in compose()["services"]["grafana"]["volumes"]


def test_promql_metric_names_are_found():
    """The PromQL name extraction finds metrics and skips functions, labels, ranges and numbers."""
    expr = (
        'histogram_quantile(0.95, sum by (le, operation) (rate(a_seconds_bucket{x="y"}[$__rate_interval])))'
        " / sum without (p) (b_total) + c"
    )
    assert promql_metric_names(expr) == {"a_seconds_bucket", "b_total", "c"}


def test_grafana_panels_query_only_exported_metrics_and_chart_every_one():
    """Every metric a Grafana panel queries is exported by the worker, and every exported metric is on a panel."""
    exported = exported_series()
    queried = {
        name
        for panel in grafana_dashboard()["panels"]
        for target in panel.get("targets", [])
        for name in promql_metric_names(target["expr"])
    }
    assert queried - set(exported) == set()
    assert {exported[name] for name in queried} == set(exported.values())


@pytest.mark.parametrize("path", sorted(str(p.relative_to(DEPLOY)) for p in DEPLOY.rglob("*.y*ml")))
def test_no_deploy_file_uses_deprecated_kubernetes_apis(path):
    """No deploy file mentions a removed or beta Kubernetes API version."""
    text = (DEPLOY / path).read_text()
    assert not re.search(r"extensions/v1beta1|apps/v1beta|autoscaling/v2beta|autoscaling/v1\b", text)


def test_kubernetes_manifests_validate_against_the_kubernetes_schemas():
    """Every built-in Kubernetes object validates, strictly (no unknown field), against the
    schemas of the newest Kubernetes release that kubernetes-validate bundles (offline)."""
    version = kubernetes_validate.latest_version()
    checked = 0
    for obj in k8s_objects():
        if obj["kind"] not in CUSTOM_KINDS:
            kubernetes_validate.validate(obj, version, strict=True)
            checked += 1
    assert checked >= 13
    deployment = copy.deepcopy(k8s_object("Deployment", "stream-rater-worker"))
    deployment["spec"]["replicaz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, version, strict=True)


#: The fields of KEDA's v2 ScaledObject CRD (keda.sh/v1alpha1) that a ScaledObject may set,
#: and the Kafka scaler's metadata keys; unknown ones are typos that KEDA would reject or ignore.
_STRING = {"type": "string"}
SCALED_OBJECT_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": dict.fromkeys(
                        ("apiVersion", "kind", "name", "envSourceContainerName"), _STRING
                    ),
                },
                **{
                    k: {"type": "integer", "minimum": 0}
                    for k in (
                        "pollingInterval",
                        "cooldownPeriod",
                        "initialCooldownPeriod",
                        "idleReplicaCount",
                        "minReplicaCount",
                        "maxReplicaCount",
                    )
                },
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"name": _STRING, "behavior": {"type": "object"}},
                        },
                        "scalingModifiers": {"type": "object"},
                    },
                },
                "fallback": {"type": "object"},
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": _STRING,
                            "name": _STRING,
                            "metricType": _STRING,
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {"type": "object"},
                            "metadata": {"type": "object", "additionalProperties": _STRING},
                        },
                    },
                },
            },
        },
    },
}
KAFKA_SCALER_KEYS = {
    "bootstrapServers",
    "consumerGroup",
    "topic",
    "lagThreshold",
    "activationLagThreshold",
    "offsetResetPolicy",
    "allowIdleConsumers",
    "scaleToZeroOnInvalidOffset",
    "excludePersistentLag",
    "limitToPartitionsWithLag",
    "ensureEvenDistributionOfPartitions",
    "partitionLimitation",
    "version",
    "sasl",
    "tls",
}


def test_keda_scales_the_worker_on_kafka_lag_up_to_the_partition_count():
    """The KEDA ScaledObject is well formed, targets the worker Deployment, reads the lag of the
    workers' consumer group on the matches topic from the configured brokers, and never asks
    for more workers than the topic has partitions."""
    scaled = k8s_object("ScaledObject", "stream-rater-worker")
    jsonschema.validate(scaled, SCALED_OBJECT_SCHEMA)
    spec, config = scaled["spec"], k8s_object("ConfigMap", "stream-rater-config")["data"]
    assert (spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"]) == (
        "Deployment",
        "stream-rater-worker",
    )
    assert spec["maxReplicaCount"] == int(config[env_name("partitions")])
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    [trigger] = spec["triggers"]
    metadata = trigger["metadata"]
    assert trigger["type"] == "kafka" and set(metadata) <= KAFKA_SCALER_KEYS
    assert metadata["topic"] == config[env_name("topic_matches")]
    assert metadata["consumerGroup"] == config[env_name("consumer_group")]
    assert metadata["bootstrapServers"] == bootstrap_servers(config[env_name("broker")])
    assert metadata["allowIdleConsumers"] == "false" and int(metadata["lagThreshold"]) > 0


def test_disruption_budgets_select_their_pods_and_allow_one_down():
    """The workers' and the Redis Cluster's PodDisruptionBudgets select exactly their pods."""
    for budget, kind in (("stream-rater-worker", "Deployment"), ("redis-cluster", "StatefulSet")):
        pdb = k8s_object("PodDisruptionBudget", budget)
        workload = k8s_object(kind, budget)
        assert pdb["spec"]["selector"] == workload["spec"]["selector"]
        assert pdb["spec"]["maxUnavailable"] == 1


def test_worker_requests_the_measured_memory():
    """The worker asks for ~120 MiB (measured RSS 81-103 MB) in Kubernetes and compose alike."""
    [container] = k8s_object("Deployment", "stream-rater-worker")["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["requests"]["memory"] == "120Mi"
    assert compose()["services"]["worker"]["deploy"]["resources"]["reservations"]["memory"] == "120M"


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.cluster.yml"])
def test_compose_files_follow_the_compose_specification(name: str):
    """Each compose file (YAML anchors and merge keys resolved) is valid under the Compose
    Specification: no unknown key, valid depends_on conditions, durations, resources."""
    PyCompose.from_json(json.dumps(compose(name)))


def test_compose_cluster_override_points_the_workers_at_a_joined_cluster():
    """The cluster override gives the workers a redis+cluster:// URL of its own nodes, makes them
    wait for the init job, and the job creates 3 masters with a replica each."""
    base, cluster = compose()["services"], compose("docker-compose.cluster.yml")["services"]
    services = {**base, **cluster}
    for service in services.values():
        assert set(service.get("depends_on", [])) <= set(services)
    url = cluster["worker"]["environment"][env_name("redis_url")]
    _, nodes = parse_cluster_url(url)
    assert {host for host, _ in nodes} <= {name for name in cluster if name.startswith("redis-node-")}
    assert (
        cluster["worker"]["depends_on"]["redis-cluster-init"]["condition"] == "service_completed_successfully"
    )
    nodes_total = sum(name.startswith("redis-node-") for name in cluster)
    script = cluster["redis-cluster-init"]["command"][-1]
    assert "--cluster-replicas 1" in script and nodes_total == 6
    assert all("--cluster-enabled yes" in cluster[f"redis-node-{n}"]["command"][-1] for n in range(1, 7))


def test_kubernetes_redis_cluster_overlay_replaces_the_single_redis():
    """The redis-cluster overlay deletes the single Redis, runs 6 cluster nodes behind a
    headless Service, and points the workers' Secret at three of them by stable DNS name."""
    [kustomization] = load_yaml(K8S / "overlays" / "redis-cluster" / "kustomization.yaml")
    deleted = {
        (p["target"]["kind"], p["target"]["name"])
        for p in kustomization["patches"]
        if "$patch: delete" in p["patch"]
    }
    assert deleted == {("StatefulSet", "redis"), ("Service", "redis")}
    [secret_patch] = [
        yaml.safe_load(p["patch"]) for p in kustomization["patches"] if p["target"]["kind"] == "Secret"
    ]
    [op] = secret_patch
    assert op["path"] == f"/stringData/{env_name('redis_url')}"
    statefulset = k8s_object("StatefulSet", "redis-cluster")
    service = k8s_object("Service", "redis-cluster")
    assert statefulset["spec"]["replicas"] == 6 and service["spec"]["clusterIP"] == "None"
    _, nodes = parse_cluster_url(op["value"])
    pods = {f"redis-cluster-{i}.{statefulset['spec']['serviceName']}" for i in range(6)}
    assert {host for host, _ in nodes} <= pods and len(nodes) == 3
    script = k8s_object("Job", "redis-cluster-init")["spec"]["template"]["spec"]["containers"][0]["command"][
        -1
    ]
    assert "--cluster-replicas 1" in script
