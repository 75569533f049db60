"""Portal's AWS provider: spot notices from IMDSv2 and a catalog of EC2 instance types.

Importing this package is light; the notice source is :class:`portal.providers.aws.notices.
AwsNoticeSource`, the test fake :class:`portal.providers.aws.testing.FakeIMDS`.
"""

__all__: list[str] = []
