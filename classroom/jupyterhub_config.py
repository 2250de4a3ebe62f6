"""JupyterHub for the Shapes classroom on one machine (started by ``classroom/run.py``).

Everything deployment-specific comes from ``$SHAPES_CLASSROOM_STATE/classroom.json`` (ports,
accounts, folders; written by run.py) and, for the gradebook password, from the root-only
``secrets/`` folder beside it. Choices:

- PAM login against local Unix accounts, and LocalProcessSpawner: each user's server runs as
  that Unix user in their own home, so the nbgrader exchange's file ownership and permissions
  mean what they mean on a real hub.
- Everything listens on 127.0.0.1 (proxy, hub API, single-user servers on random free ports),
  unless run.py was given another ``--ip`` for the public proxy.
- Each server gets ``JUPYTER_CONFIG_PATH`` for its role and the course's settings in its
  environment (``SHAPES_COURSE_ID``, ``SHAPES_EXCHANGE_ROOT``; the instructor also
  ``SHAPES_COURSE_ROOT``, ``SHAPES_GRADEBOOK_URL`` and a ``PYTHONPATH`` to a private copy of the
  grader). Students never see the gradebook URL, and no copy of ``course_grading`` is in their view.
"""

import importlib.util
import json
import os
from pathlib import Path

c = get_config()  # noqa: F821

state = Path(os.environ["SHAPES_CLASSROOM_STATE"])
settings = json.loads((state / "classroom.json").read_text())
gradebook_url = (state / "secrets" / "gradebook_url").read_text().strip()
venv_bin = Path(settings["venv"]) / "bin"

# --- the hub and its proxy ------------------------------------------------------------------
c.JupyterHub.bind_url = f"http://{settings['ip']}:{settings['port']}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{settings['hub_api_port']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [settings["proxy"]]
c.ConfigurableHTTPProxy.pid_file = str(state / "hub" / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{state / 'hub' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "secrets" / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(state / "hub" / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every single-user server
c.JupyterHub.cleanup_proxy = True

# --- who may log in -------------------------------------------------------------------------
c.JupyterHub.authenticator_class = "pam"
c.PAMAuthenticator.open_sessions = False  # no login sessions to open in a container
c.Authenticator.allowed_users = {settings["instructor"], *settings["students"]}
c.Authenticator.admin_users = set()  # the instructor grades; nobody administers the hub here

# Students log in from the LMS (LTI 1.3) when the state folder holds lti.json (classroom/lti.py):
# each launch its own account, named from the platform's issuer and sub; the LMS login is the
# student's nbgrader id; whoever the launch's roles call an instructor logs in as the instructor.
_lti = None
if (state / "lti.json").is_file():
    _spec = importlib.util.spec_from_file_location(
        "classroom_lti", Path(__file__).parent / "lti.py"
    )
    _lti = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_lti)
    _lti.configure_from_state(c, state)

# --- each user's server ----------------------------------------------------------------------
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(venv_bin / "jupyterhub-singleuser")]
c.Spawner.ip = "127.0.0.1"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120  # a cold start imports JupyterLab and nbgrader on a busy machine
c.Spawner.http_timeout = 120


def _environment(spawner) -> None:
    """The role's configuration folder and the course's settings, set before each spawn.

    Under LTI a launched student's server gets their nbgrader id (``SHAPES_STUDENT_ID``, the
    registry's; a launched user the registry does not know gets no server), and the
    instructor's the file mapping each launched account to its id (``SHAPES_STUDENT_IDS``).
    """
    instructor = spawner.user.name == settings["instructor"]
    role = "instructor" if instructor else "student"
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": settings["etc"][role],
        "SHAPES_COURSE_ID": settings["course_id"],
        "SHAPES_EXCHANGE_ROOT": settings["exchange"],
    }
    if instructor:
        env["SHAPES_COURSE_ROOT"] = settings["course_root"]
        env["SHAPES_GRADEBOOK_URL"] = gradebook_url
        # The grader (course_folder.install_grader): hidden from everyone else's view.
        env["PYTHONPATH"] = settings["grader"]
        env["SHAPES_COURSE_SECRET_FILE"] = settings["course_secret"]  # hidden inputs' secret
    if _lti is not None:
        student_id = spawner.authenticator.student_id_of(spawner.user.name)
        if student_id is not None:
            env["SHAPES_STUDENT_ID"] = student_id
        if instructor:
            env["SHAPES_STUDENT_IDS"] = str(_lti.ids_file(state))
    spawner.environment = env


c.Spawner.pre_spawn_hook = _environment
