"""boto3 against pando's S3 gateway: what TestS3Boto3 checks.

Arguments: endpoint, CA file, access key, secret, a local file to upload
(large enough for a multipart upload), a directory for downloads.
Prints one line per step; exits non-zero with the step that failed.
"""
import hashlib
import os
import sys

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, ca, key, secret, big, out = sys.argv[1:7]
s3 = boto3.client(
    "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
    region_name="us-east-1", verify=ca,
    config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)


def step(name):
    print(name, flush=True)


step("list buckets")
names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
assert "data" in names, names

step("put small")
s3.put_object(Bucket="data", Key="boto/small.txt", Body=b"from boto3\n")
head = s3.head_object(Bucket="data", Key="boto/small.txt")
assert head["ContentLength"] == 11, head
assert head["ETag"].strip('"') == hashlib.md5(b"from boto3\n").hexdigest(), head["ETag"]

step("multipart upload")
cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20, max_concurrency=2)
s3.upload_file(big, "data", "boto/big.bin", Config=cfg)
etag = s3.head_object(Bucket="data", Key="boto/big.bin")["ETag"].strip('"')
parts = -(-os.path.getsize(big) // (5 << 20))
assert etag.endswith("-%d" % parts), "ETag %s is not that of a %d-part upload" % (etag, parts)

step("download")
got = os.path.join(out, "got.bin")
s3.download_file("data", "boto/big.bin", got, Config=cfg)
with open(big, "rb") as a, open(got, "rb") as b:
    assert a.read() == b.read(), "the download differs from the upload"

step("ranged get")
r = s3.get_object(Bucket="data", Key="boto/big.bin", Range="bytes=5242875-5242884")
with open(big, "rb") as f:
    f.seek(5242875)
    assert r["Body"].read() == f.read(10)

step("list objects v2")
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="data", Prefix="boto/", PaginationConfig={"PageSize": 1}):
    keys += [o["Key"] for o in page.get("Contents", [])]
assert keys == ["boto/big.bin", "boto/small.txt"], keys

step("delete")
s3.delete_object(Bucket="data", Key="boto/small.txt")
try:
    s3.head_object(Bucket="data", Key="boto/small.txt")
    raise AssertionError("the deleted object is still there")
except ClientError as e:
    assert e.response["Error"]["Code"] in ("404", "NoSuchKey"), e.response

step("ok")
