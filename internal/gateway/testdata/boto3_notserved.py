"""boto3's calls that the S3 gateway does not serve: what TestS3Boto3NotServed checks.

Arguments: endpoint, CA file, access key, secret, the share's path of data/obj.txt.
Each refused call must fail with NotImplemented (or S3's own error) and leave the
object's bytes at the share as they were. Prints one line per step; exits non-zero
with the step that failed.
"""
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint, ca, key, secret, at_share = sys.argv[1:6]
s3 = boto3.client(
    "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret,
    region_name="us-east-1", verify=ca,
    config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)
with open(at_share, "rb") as f:
    content = f.read()


def step(name):
    print(name, flush=True)


def refused(name, call, code="NotImplemented"):
    step(name)
    try:
        call()
    except ClientError as e:
        got = e.response["Error"]["Code"]
        assert got == code, "%s: %s, want %s" % (name, got, code)
    else:
        raise AssertionError("%s succeeded" % name)
    with open(at_share, "rb") as f:
        now = f.read()
    assert now == content, "after %s the share holds %r" % (name, now[:80])


B, K = "data", "obj.txt"
refused("put_object_acl", lambda: s3.put_object_acl(Bucket=B, Key=K, ACL="private"))
refused("put_object_tagging", lambda: s3.put_object_tagging(Bucket=B, Key=K, Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}))
refused("put_object_retention", lambda: s3.put_object_retention(
    Bucket=B, Key=K, Retention={"Mode": "GOVERNANCE", "RetainUntilDate": "2030-01-01T00:00:00Z"}))
refused("put_object_legal_hold", lambda: s3.put_object_legal_hold(Bucket=B, Key=K, LegalHold={"Status": "ON"}))
refused("delete_object_tagging", lambda: s3.delete_object_tagging(Bucket=B, Key=K))
refused("get_object_acl", lambda: s3.get_object_acl(Bucket=B, Key=K))
refused("get_object_tagging", lambda: s3.get_object_tagging(Bucket=B, Key=K))
refused("get_object_attributes", lambda: s3.get_object_attributes(Bucket=B, Key=K, ObjectAttributes=["ETag"]))
refused("get_object_retention", lambda: s3.get_object_retention(Bucket=B, Key=K))
refused("get_object_legal_hold", lambda: s3.get_object_legal_hold(Bucket=B, Key=K))
refused("get_object_torrent", lambda: s3.get_object_torrent(Bucket=B, Key=K))
refused("put_bucket_acl", lambda: s3.put_bucket_acl(Bucket=B, ACL="private"))
refused("get_bucket_acl", lambda: s3.get_bucket_acl(Bucket=B))
refused("put_bucket_tagging", lambda: s3.put_bucket_tagging(Bucket=B, Tagging={"TagSet": [{"Key": "k", "Value": "v"}]}))
refused("put_object If-None-Match", lambda: s3.put_object(Bucket=B, Key=K, Body=b"over", IfNoneMatch="*"), "PreconditionFailed")
refused("copy_object onto itself", lambda: s3.copy_object(Bucket=B, Key=K, CopySource={"Bucket": B, "Key": K}), "InvalidRequest")

step("upload_part_copy")
up = s3.create_multipart_upload(Bucket=B, Key="copied.txt")
part = s3.upload_part_copy(Bucket=B, Key="copied.txt", UploadId=up["UploadId"], PartNumber=1, CopySource={"Bucket": B, "Key": K})
etag = part["CopyPartResult"]["ETag"]
parts = s3.list_parts(Bucket=B, Key="copied.txt", UploadId=up["UploadId"])["Parts"]
assert [p["PartNumber"] for p in parts] == [1], parts
uploads = s3.list_multipart_uploads(Bucket=B).get("Uploads", [])
assert [u["UploadId"] for u in uploads] == [up["UploadId"]], uploads
s3.complete_multipart_upload(Bucket=B, Key="copied.txt", UploadId=up["UploadId"],
                             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
got = s3.get_object(Bucket=B, Key="copied.txt")["Body"].read()
assert got == content, got
print("ok")
