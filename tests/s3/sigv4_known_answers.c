/* SigV4 against AWS's published examples: signing-key derivation, the IAM
 * ListUsers request, the sigv4 test suite's get-vanilla, and S3's GetObject
 * example with a Range header. Any byte off in canonicalisation fails here. */
#include <string.h>

#include "daemon/ship/s3/s3_int.h"
#include "../tap.h"

static void hex32(const uint8_t *k, char out[65])
{
        for (int i = 0; i < 32; i++)
                sprintf(out + 2 * i, "%02x", k[i]);
}

static const char *signature_of(const char *auth)
{
        const char *s = strstr(auth, "Signature=");
        return s ? s + 10 : "";
}

static void signing_key_derivation(void)
{
        uint8_t key[32];
        char hex[65];
        sigv4_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830", "us-east-1", "iam", key);
        hex32(key, hex);
        ok(!strcmp(hex, "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"),
           "signing key for 20150830/us-east-1/iam matches AWS's example (%s)", hex);
}

static void iam_list_users(void)
{
        char empty[65], auth[1024];
        s3_sha256_hex("", 0, empty);
        struct sigv4_header h[] = {
                { "content-type", "application/x-www-form-urlencoded; charset=utf-8" },
                { "host", "iam.amazonaws.com" },
                { "x-amz-date", "20150830T123600Z" },
        };
        struct sigv4_input in = {
                .method = "GET", .canonical_uri = "/",
                .canonical_query = "Action=ListUsers&Version=2010-05-08", .headers = h,
                .n_headers = 3, .payload_sha256 = empty, .amz_date = "20150830T123600Z",
                .region = "us-east-1", .service = "iam", .access_key = "AKIDEXAMPLE",
                .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        };
        int n = sigv4_authorization(&in, auth, sizeof auth);
        ok(n > 0 && !strcmp(signature_of(auth), "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"),
           "IAM ListUsers example signature matches (%s)", auth);
        ok(strstr(auth, "Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, "
                        "SignedHeaders=content-type;host;x-amz-date, ") != NULL,
           "Authorization header carries credential scope and signed headers");
}

static void get_vanilla(void)
{
        char empty[65], auth[1024];
        s3_sha256_hex("", 0, empty);
        struct sigv4_header h[] = {
                { "host", "example.amazonaws.com" },
                { "x-amz-date", "20150830T123600Z" },
        };
        struct sigv4_input in = {
                .method = "GET", .canonical_uri = "/", .canonical_query = "", .headers = h,
                .n_headers = 2, .payload_sha256 = empty, .amz_date = "20150830T123600Z",
                .region = "us-east-1", .service = "service", .access_key = "AKIDEXAMPLE",
                .secret_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        };
        sigv4_authorization(&in, auth, sizeof auth);
        ok(!strcmp(signature_of(auth), "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
           "sigv4 test suite get-vanilla signature matches (%s)", signature_of(auth));
}

static void s3_get_object_example(void)
{
        char empty[65], auth[1024];
        s3_sha256_hex("", 0, empty);
        ok(!strcmp(empty, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
           "SHA-256 of the empty payload");
        struct sigv4_header h[] = {
                { "host", "examplebucket.s3.amazonaws.com" },
                { "range", "bytes=0-9" },
                { "x-amz-content-sha256", empty },
                { "x-amz-date", "20130524T000000Z" },
        };
        struct sigv4_input in = {
                .method = "GET", .canonical_uri = "/test.txt", .canonical_query = "",
                .headers = h, .n_headers = 4, .payload_sha256 = empty,
                .amz_date = "20130524T000000Z", .region = "us-east-1", .service = "s3",
                .access_key = "AKIAIOSFODNN7EXAMPLE",
                .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        };
        sigv4_authorization(&in, auth, sizeof auth);
        ok(!strcmp(signature_of(auth), "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
           "S3 GetObject example signature matches (%s)", signature_of(auth));
}

static void uri_encoding(void)
{
        char out[256];
        s3_uri_encode("d9/2026-01-02/0304/svc/host a/abcd-1/17-0.bin.gz", 1, out, sizeof out);
        ok(!strcmp(out, "d9/2026-01-02/0304/svc/host%20a/abcd-1/17-0.bin.gz"),
           "key path keeps '/' and encodes space as %%20: %s", out);
        s3_uri_encode("a/b+c=d~e_", 0, out, sizeof out);
        ok(!strcmp(out, "a%2Fb%2Bc%3Dd~e_"), "query value encodes '/', '+', '=' and keeps '~': %s", out);
}

int main(void)
{
        signing_key_derivation();
        iam_list_users();
        get_vanilla();
        s3_get_object_example();
        uri_encoding();
        return tap_done();
}
