"""Security settings (README "Security"): client keys parse like BookKeeper's, come from BKLEDGER_CLIENT_CONF,
reach Spark options, and bad ones fail with an InvalidOptionError naming the key."""

from __future__ import annotations

import pytest

from bkledger.client.config import ClientConfig
from bkledger.client.errors import InvalidOptionError
from bkledger.client.meta.zkauth import is_discovery, zk_auth
from bkledger.client.tls import TLS_FACTORY_CLASS, TlsSettings, rejection, settings_of, validate
from bkledger.spark_connector.read_options import parse_read_options


def test_booleans_parse_as_words():
    assert ClientConfig.from_options({"tlsClientAuthentication": "false"}).tlsClientAuthentication is False
    assert ClientConfig.from_options({"zkEnableSecurity": "TRUE"}).zkEnableSecurity is True
    with pytest.raises(InvalidOptionError, match="tlsClientAuthentication"):
        ClientConfig.from_options({"tlsClientAuthentication": "sometimes"})


def test_client_conf_file_from_the_environment(tmp_path, monkeypatch):
    conf = tmp_path / "client.conf"
    conf.write_text(f"# secure\ntlsProviderFactoryClass={TLS_FACTORY_CLASS}\ntlsTrustStore=/ca.pem\nreadTimeout=7\n")
    monkeypatch.setenv("BKLEDGER_CLIENT_CONF", str(conf))
    config = ClientConfig.from_environment({"readTimeout": "9"})
    assert config.tlsTrustStore == "/ca.pem" and config.readTimeout == 9.0
    assert config.security_options() == {"tlsProviderFactoryClass": TLS_FACTORY_CLASS, "tlsTrustStore": "/ca.pem"}
    monkeypatch.setenv("BKLEDGER_CLIENT_CONF", str(tmp_path / "missing.conf"))
    with pytest.raises(InvalidOptionError, match="BKLEDGER_CLIENT_CONF"):
        ClientConfig.from_environment()


def test_spark_options_carry_the_security_keys():
    opts = parse_read_options({"metadataserviceuri": "zk://h:1/ledgers", "log": "x",
                               "tlsproviderfactoryclass": TLS_FACTORY_CLASS, "zkdigestuser": "bk"})
    assert dict(opts.source.client_settings) == {"tlsProviderFactoryClass": TLS_FACTORY_CLASS, "zkDigestUser": "bk"}


def test_unusable_tls_settings_name_the_key():
    on = {"tlsProviderFactoryClass": TLS_FACTORY_CLASS}
    with pytest.raises(InvalidOptionError, match="tlsTrustStore"):
        validate(settings_of(ClientConfig.from_options(on)))
    with pytest.raises(InvalidOptionError, match="only PEM"):
        validate(TlsSettings(**on, tlsTrustStore="/ca", tlsKeyStoreType="JKS"))
    with pytest.raises(InvalidOptionError, match="tlsKeyStore"):
        validate(TlsSettings(**on, tlsTrustStore="/ca", tlsClientAuthentication=True))
    with pytest.raises(InvalidOptionError, match="tlsProviderFactoryClass"):
        validate(TlsSettings(tlsProviderFactoryClass="com.example.Other"))
    validate(TlsSettings(**on, tlsCertificatePath="/c", tlsKeyStore="/k"), server=True)   # no trust store needed


def test_zookeeper_security_needs_both_credentials(tmp_path):
    with pytest.raises(InvalidOptionError, match="zkDigestUser"):
        zk_auth(ClientConfig(zkEnableSecurity=True))
    with pytest.raises(InvalidOptionError, match="neither"):
        zk_auth(ClientConfig(zkDigestUser="bk"))
    (tmp_path / "pw").write_text("s3cret\n")
    auth = zk_auth(ClientConfig(zkDigestUser="bk", zkDigestPasswordPath=str(tmp_path / "pw")))
    assert auth is not None and auth.auth_data == [("digest", "bk:s3cret")] and not auth.enable_acl
    assert auth.acl_for("/ledgers/L0001", "/ledgers") is None
    assert zk_auth(ClientConfig()) is None


def test_only_discovery_znodes_are_world_readable():
    root = "/c/ledgers"
    for path in (root, f"{root}/LAYOUT", f"{root}/INSTANCEID", f"{root}/available", f"{root}/available/h:1",
                 f"{root}/available/readonly/h:1"):
        assert is_discovery(path, root), path
    for path in (f"{root}/00/0000/L0001", f"{root}/cookies/h:1", f"{root}/logs/x", f"{root}/idgen",
                 f"{root}/availablex", "/c"):
        assert not is_discovery(path, root), path


def test_rejections_say_what_happened():
    on = TlsSettings(tlsProviderFactoryClass=TLS_FACTORY_CLASS, tlsTrustStore="/ca")
    closed = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
    assert rejection(closed, TlsSettings(), "b", "a:1").reason == "plaintext client"
    assert rejection(closed, on, "b", "a:1").reason == "missing client certificate"
    verify = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
              "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED: unable to get local issuer")
    assert rejection(verify, on, "b", "a:1").reason == "server certificate: unknown CA"
    host = "failed to connect; last error: Custom verification check failed: Hostname Verification Check failed."
    assert rejection(host, on, "b", "a:1").reason == "hostname"
    assert rejection("Socket closed", on, "b", "a:1") is None          # a running stream that broke: not TLS
    assert rejection("failed to connect to all addresses; Connection refused", on, "b", "a:1") is None
